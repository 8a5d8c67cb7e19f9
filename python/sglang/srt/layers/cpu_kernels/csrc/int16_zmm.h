// The int16 arithmetic's products of 5-8 rows of x in one pass over the weights, on 512-bit registers (the
// AVX-512 families' libraries only): two 8-row groups of int8_linear.h's layout side by side (16 outputs, one
// per int32 lane), each weight vector widened to int16 pairs once and multiplied into every row's one int32 chain
// (vpdpwssd), then the block scaled into the row's float accumulator and the Q4 mins' term summed after the
// blocks: i16_group_lean's operations lane by lane, so the same bits as every int16 kernel
// (tests/integration/test_integer_kernels.py). The 256-bit kernels keep two chains a row and spill past 4 rows
// (a second pass over the weights from 5 rows); here 8 rows take 8 chains and 8 accumulators of the 32 registers.
// quant_groups runs it: the amx family's library for 5-8 rows (more go to the tiles), the avx512_vnni family's for
// every batch of 5+ rows, in chunks of 5-8 (on the Zen 4 EPYC, which splits 512-bit operations in two, one thread's
// int16 products took 1.11-1.29x less time than the 256-bit kernels' passes of up to 4 rows at 5-64 rows; whole
// steps of 5 / 16 / 32 / 64 rows 1.06x / 1.06-1.07x / 1.05x / 1.05x, bench/kernel_ab.py). Included by quant_linear.h.
#pragma once
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "vec.h"

namespace {
namespace zmm16 {

constexpr int kMaxRows = 8;
// the fewest rows this kernel serves: below, the 256-bit kernels' one pass of up to 4 rows, whose two chains a row
// hide the vpdpwssd latency that one chain a row here does not (on the AMX Xeon, bench/kernel_ab.py, a step of 2 / 3 /
// 4 rows 4.9 / 5.9 / 6.7 ms there, 5.4 / 6.2 / 7.1 here; 5 / 6 / 7 / 8 rows 7.7 / 8.7 / 9.3 / 10.5-10.7 ms here
// against 8.7 / 9.1 / 10.2 / 10.3-10.7 on the AMX tiles and 9.3 / 9.9 / - / 12.1 in the 256-bit kernels' two passes)
constexpr int kMinRows = 5;

// 16 float16 values: 8 at a, 8 at b
inline __m512 load_f16x16(const uint16_t* a, const uint16_t* b) {
  const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  return _mm512_cvtph_ps(h);
}

// F::load's vector i of the blocks at pa (outputs 0-7) and pb (8-15), widened to int16 pairs as F::widen does,
// in every 128-bit lane alike: *a holds (w[4i], w[4i+1]) of each output, *c (w[4i+2], w[4i+3])
template <typename F>
inline void widen_pair(const uint8_t* pa, const uint8_t* pb, int i, __m512i* a, __m512i* c) {
  __m256i a0, c0, a1, c1;
  F::widen(F::load(pa, i), &a0, &c0);
  F::widen(F::load(pb, i), &a1, &c1);
  *a = _mm512_inserti64x4(_mm512_castsi256_si512(a0), a1, 1);
  *c = _mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1);
}

// y[m, n0 .. n0 + 16) for M rows of int16 x (xq [M, K], xd/xs [M, K / 32]): groups at wa/wb, scales at sa/sb
template <int M, typename F>
void pair_rows(const uint8_t* wa, const uint8_t* wb, const uint16_t* sa, const uint16_t* sb, const int16_t* xq, const float* xd,
               const float* xs, float* y, int64_t K, int64_t N, int64_t n0) {
  const int64_t nb = K / 32, ss = F::kMin ? 16 : 8;
  __m512 acc[M];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pa = wa + b * F::kBytes;
    const uint8_t* pb = wb + b * F::kBytes;
    prefetch_weights<M, F::kBytes>(pa);
    prefetch_weights<M, F::kBytes>(pb);
    __m512i s[M];
    for (int m = 0; m < M; ++m) s[m] = _mm512_setzero_si512();
    for (int i = 0; i < 8; ++i) {
      __m512i a, c;
      widen_pair<F>(pa, pb, i, &a, &c);
      for (int m = 0; m < M; ++m) {
        const int16_t* xb = xq + m * K + b * 32 + 4 * i;
        int32_t x01, x23;
        std::memcpy(&x01, xb, 4);
        std::memcpy(&x23, xb + 2, 4);
        s[m] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(s[m], a, _mm512_set1_epi32(x01)), c, _mm512_set1_epi32(x23));
      }
    }
    const __m512 dw = load_f16x16(sa + b * ss, sb + b * ss);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
      acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[m]), _mm512_mul_ps(dw, _mm512_set1_ps(xd[m * nb + b])), acc[m]);
  }
  if constexpr (F::kMin) {  // the mins' term block by block, as store_lean sums it
    __m512 macc[M];
    for (int m = 0; m < M; ++m) macc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const __m512 mn = load_f16x16(sa + b * 16 + 8, sb + b * 16 + 8);
      for (int m = 0; m < M; ++m) macc[m] = _mm512_fmadd_ps(mn, _mm512_set1_ps(xs[m * nb + b]), macc[m]);
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) acc[m] = _mm512_add_ps(acc[m], macc[m]);
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) _mm512_storeu_ps(y + m * N + n0, acc[m]);
}

// y[:, 8 g0 .. ) for the pairs of whole groups from g0 on, for M rows of int16 x (kMinRows <= M <= kMaxRows);
// returns the first group left to the 256-bit kernels (a last odd or partial one)
template <typename F>
int64_t i16_pairs(const uint8_t* wp, const uint16_t* sp, const int16_t* xq, const float* xd, const float* xs, float* y, int64_t M, int64_t K,
                  int64_t N, int64_t g0, int64_t g1) {
  const int64_t pairs = std::max<int64_t>(0, (std::min(g1, N / 8) - g0) / 2);
  const int64_t nb = K / 32, ss = F::kMin ? 16 : 8;
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t g = g0 + 2 * p;
    const uint8_t *wa = wp + g * nb * F::kBytes, *wb = wa + nb * F::kBytes;
    const uint16_t *sa = sp + g * nb * ss, *sb = sa + nb * ss;
    switch (M) {
      case 5: pair_rows<5, F>(wa, wb, sa, sb, xq, xd, xs, y, K, N, 8 * g); break;
      case 6: pair_rows<6, F>(wa, wb, sa, sb, xq, xd, xs, y, K, N, 8 * g); break;
      case 7: pair_rows<7, F>(wa, wb, sa, sb, xq, xd, xs, y, K, N, 8 * g); break;
      default: pair_rows<8, F>(wa, wb, sa, sb, xq, xd, xs, y, K, N, 8 * g); break;
    }
  }
  return g0 + 2 * pairs;
}

}  // namespace zmm16
}  // namespace
#endif
