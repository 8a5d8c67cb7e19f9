// int16-activation products on the GGUF's blocks (q4_linear_i16, q8_linear_i16): the weights of
// int8_linear.h's repacked layout (the same tensors, q4_packed.pack_i8 / pack_q8_i8), the activations
// quantized once per call to int16 in blocks of 32 (d = absmax / 32767, s = d * sum(q)), every block
// an int16 x int16 dot product summed in int32 (isa::dot_i16: vpdpwssd, or vpmaddwd + vpaddd),
// scaled in float32 as the int8 kernels are:
//   Q4_0/Q4_1:  sum w x ~= dw * dx * sum(q * a) + mw * sx        Q8_0:  sum w x ~= dw * dx * sum(q * a)
// An activation is off by at most half of 1/32767 of its block's largest value (int8: 1/127), so the
// products keep float32's answers (about 2e-5 relative error per product) while a block's 32 weights
// cost 8 int16 dot-product instructions and no float conversion per weight, where float32 decodes
// every weight to a float (q4_linear_f32): about 2.5x fewer instructions per weight at one row.
// quant_linear.h runs them. Included by decode_step.cpp after int8_linear.h.
#pragma once

#include <algorithm>
#include <cstring>

#include "isa_family.h"
#include "vec.h"

namespace {

// 32 floats -> 32 int16 (d = absmax / 32767)
inline void quantize_block32_i16(const float* x, int16_t* q, float* d, float* s) {
  __m256i r[4];
  round_block32(x, 32767.f, r, d, s);
  // packs interleaves 128-bit lanes ([a0-3, b0-3, a4-7, b4-7]); the 64-bit permutation puts them in order
  for (int h = 0; h < 2; ++h)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 16 * h),
                        _mm256_permute4x64_epi64(_mm256_packs_epi32(r[2 * h], r[2 * h + 1]), 0xD8));
}

// The weight vector i of a repacked block (lane j: row j's weights 4i..4i+3 as bytes) widened to int16
// pairs that keep one row per 32-bit lane: *a holds (w[4i], w[4i+1]), *c holds (w[4i+2], w[4i+3]).
// Q4 nibbles are unsigned (zero-extended by the shuffle); Q8_0 bytes are signed (shuffled into the
// high byte, then shifted down arithmetically).
struct Q4I16 : Q4I8 {
  static __m256i load(const uint8_t* p, int i) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * (i / 2)));
    const __m256i lo = _mm256_set1_epi8(15);
    return (i & 1) ? _mm256_and_si256(_mm256_srli_epi16(v, 4), lo) : _mm256_and_si256(v, lo);
  }
  static void widen(__m256i w, __m256i* a, __m256i* c) {
    const __m256i ia = _mm256_setr_epi8(0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13, -1,
                                        0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13, -1);
    const __m256i ic = _mm256_setr_epi8(2, -1, 3, -1, 6, -1, 7, -1, 10, -1, 11, -1, 14, -1, 15, -1,
                                        2, -1, 3, -1, 6, -1, 7, -1, 10, -1, 11, -1, 14, -1, 15, -1);
    *a = _mm256_shuffle_epi8(w, ia);
    *c = _mm256_shuffle_epi8(w, ic);
  }
};

struct Q8I16 : Q8I8 {
  static __m256i load(const uint8_t* p, int i) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * i)); }
  static void widen(__m256i w, __m256i* a, __m256i* c) {
    const __m256i ia = _mm256_setr_epi8(-1, 0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13,
                                        -1, 0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13);
    const __m256i ic = _mm256_setr_epi8(-1, 2, -1, 3, -1, 6, -1, 7, -1, 10, -1, 11, -1, 14, -1, 15,
                                        -1, 2, -1, 3, -1, 6, -1, 7, -1, 10, -1, 11, -1, 14, -1, 15);
    *a = _mm256_srai_epi16(_mm256_shuffle_epi8(w, ia), 8);
    *c = _mm256_srai_epi16(_mm256_shuffle_epi8(w, ic), 8);
  }
};

// y[m, 8 rows of group grp] for M rows of int16 x (xq [M, K], xd/xs [M, nb])
template <int M, typename F>
void i16_group(const uint8_t* wg, const uint16_t* smg, const int16_t* xq, const float* xd, const float* xs, float* y, int64_t K,
               int64_t N, int64_t n0) {
  const int64_t nb = K / 32;
  __m256 acc[M], macc[M];
  for (int m = 0; m < M; ++m) acc[m] = macc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = wg + b * F::kBytes;
    prefetch_weights<M, F::kBytes>(wb);
    __m256i sa[M], sc[M];  // two int32 chains per row of x (the pairs' halves)
    for (int m = 0; m < M; ++m) sa[m] = sc[m] = _mm256_setzero_si256();
    for (int i = 0; i < 8; ++i) {
      __m256i a, c;
      F::widen(F::load(wb, i), &a, &c);
      for (int m = 0; m < M; ++m) {
        const int16_t* xb = xq + m * K + b * 32 + 4 * i;
        sa[m] = isa::dot_i16(sa[m], a, xb);
        sc[m] = isa::dot_i16(sc[m], c, xb + 2);
      }
    }
    const uint16_t* s = smg + b * (F::kMin ? 16 : 8);
    const __m256 dw = load_f16x8(s);
    for (int m = 0; m < M; ++m) scale_into<F::kMin>(_mm256_add_epi32(sa[m], sc[m]), s, dw, xd[m * nb + b], xs[m * nb + b], acc[m], macc[m]);
  }
  store_rows<M, F::kMin>(acc, macc, y, N, n0);
}

// i16_group in the lean shape (isa::kLeanRows): one int32 chain and one float accumulator a row while the blocks
// stream (two chains a row, as i16_group keeps, spill past 4 rows in 16 registers), the Q4 mins' term after them
// (store_lean): the same bits as i16_group, row by row; scheduled as int8_linear.h's pin says
template <int M, typename F>
SGLANG_LEAN_GROUP void i16_group_lean(const uint8_t* wg, const uint16_t* smg, const int16_t* xq, const float* xd, const float* xs, float* y, int64_t K,
                    int64_t N, int64_t n0) {
  const int64_t nb = K / 32;
  __m256 acc[M];
  for (int m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = wg + b * F::kBytes;
    prefetch_weights<M, F::kBytes>(wb);
    __m256i s[M];
    for (int i = 0; i < 8; ++i) {
      __m256i a, c;
      F::widen(F::load(wb, i), &a, &c);
      for (int m = 0; m < M; ++m) {
        const int16_t* xb = xq + m * K + b * 32 + 4 * i;
        const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(a, bcast4(xb)), _mm256_madd_epi16(c, bcast4(xb + 2)));
        s[m] = i == 0 ? p : _mm256_add_epi32(s[m], p);
        pin(s[m]);
      }
    }
    const __m256 dw = load_f16x8(smg + b * (F::kMin ? 16 : 8));
    for (int m = 0; m < M; ++m) scale_dot(s[m], dw, xd[m * nb + b], acc[m]);
  }
  store_lean<M, F::kMin>(acc, smg, xs, nb, y, N, n0);
}

// The int16 activations for quant_linear.h's driver
struct I16Act {
  using T = int16_t;
  static constexpr const char* kName = "int16";
  // the wide shape's two int32 chains per row spill past 4 rows on either family (gate_up, weights in cache,
  // avx512_vnni: 80 us at 4 rows, 173 at 5, 247 at 8), so more rows go in further chunks of at most 4; the lean
  // shape's one chain a row holds isa::kMaxRows
  static constexpr int kMaxRows = isa::kLeanRows ? isa::kMaxRows : 4;
  static void quantize(const float* x, T* q, float* d, float* s, bool = false) { quantize_block32_i16(x, q, d, s); }
  template <int M, typename F>
  static void group(const uint8_t* wg, const uint16_t* smg, const T* xq, const float* xd, const float* xs, float* y, int64_t K,
                    int64_t N, int64_t n0) {
    if constexpr (isa::kLeanRows) i16_group_lean<M, F>(wg, smg, xq, xd, xs, y, K, N, n0);
    else i16_group<M, F>(wg, smg, xq, xd, xs, y, K, N, n0);
  }
};

}  // namespace
