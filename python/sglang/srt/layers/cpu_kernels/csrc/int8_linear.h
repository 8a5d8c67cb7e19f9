// Integer products on the GGUF's blocks (q4_linear_i8, q8_linear_i8), as llama.cpp computes Q4 x Q8:
// the activations are quantized once per call to int8 in blocks of 32 (a float32 scale
// d = absmax / 127 and s = d * sum(q), llama.cpp's Q8_1), and every block of 32 products is an int8
// dot product (the family's instructions: isa::dot_q4_block / dot_q8_block in the wide shape, the same
// sums vector by vector in avx2's lean one) scaled in float32:
//   Q4_0/Q4_1 (w = dw * q + mw, q unsigned 0..15):  sum w x ~= dw * dx * sum(q * a) + mw * sx
//   Q8_0 (w = dw * q, q signed):                     sum w x ~= dw * dx * sum(q * a)
// The weights are repacked once at load (q4_packed.pack_i8 / pack_q8_i8) into groups of 8 output
// rows interleaved 4 bytes at a time, so lane j of every int32 vector is output row j: a block's
// sums come out of the dot products already one per row (no horizontal sums), and the block's 8
// weight scales and mins are one vector each. Each unpacked block serves up to isa::kMaxRows rows of
// x (register-blocked GEMM), in the shape the family's registers suit (isa::kLeanRows; both give the
// same bits); groups of 8 output rows run in parallel.
// quant_linear.h runs them (the driver and the entry points shared with the int16 kernels).
// Included by decode_step.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>

#include "isa_family.h"
#include "vec.h"

namespace {

// 32 floats -> 4 x 8 int32 r = x * top / absmax rounded to nearest even (|r| <= top, the MXCSR default),
// *d = absmax / top, *s = *d * sum of r: the block quantization of both integer activations
inline void round_block32(const float* x, float top, __m256i* r, float* d, float* s, bool count = false) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 v[4];
  for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
  __m256 a = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                           _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float amax = _mm_cvtss_f32(m);
  const __m256 id = _mm256_set1_ps(amax > 0.f ? top / amax : 0.f);
  for (int i = 0; i < 4; ++i) r[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
  const __m256i sum8 = _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
  *d = amax / top;
  const float sum = static_cast<float>(_mm_cvtsi128_si32(t));  // exact: |sum| <= 32 * 32767
  *s = count ? sum : *d * sum;
}

// 32 floats -> 32 int8 (as llama.cpp's quantize_row_q8_1: d = absmax / 127); *s = d * sum(q), or with `count` the
// integer sum(q) itself (a Q8_0 product's input: its weights have no mins, and kQ8Offset takes the exact sum)
inline void quantize_block32(const float* x, int8_t* q, float* d, float* s, bool count = false) {
  __m256i r[4];
  round_block32(x, 127.f, r, d, s, count);
  // int32 -> int8 in order: the packs interleave 128-bit lanes, the permutation undoes it
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// The weight scales are GGUF's own float16 values (lossless): at one row a product streams its
// weights once, and float32 scales made a Q4 block 24 bytes for 32 weights instead of 20.
inline __m256 load_f16x8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// Q4 repacked: w [G, nb * 128] bytes (group of 8 rows, block b: 4 vectors of 32 bytes; byte 4j + i of
// vector g holds row j's weight 8g + i in the low nibble and 8g + 4 + i in the high one),
// sm [G, nb, 2, 8] float16 (the 8 rows' scales, then their mins)
struct Q4I8 {
  static constexpr bool kMin = true;
  static constexpr int64_t kBytes = 128;  // per block of 8 rows
  // vectors 2g (the low nibbles) and 2g + 1 (the high ones) of the block at p
  static void unpack_pair(const uint8_t* p, int g, __m256i* lo, __m256i* hi) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * g)), mask = _mm256_set1_epi8(15);
    *lo = _mm256_and_si256(v, mask);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
  }
  static void unpack(const uint8_t* p, __m256i* w) {
    for (int g = 0; g < 4; ++g) unpack_pair(p, g, &w[2 * g], &w[2 * g + 1]);
  }
  static __m256i dot(const __m256i* w, const int8_t* x) { return isa::dot_q4_block(w, x); }
};

// Q8_0 repacked: w [G, nb * 256] (block b: 8 vectors of 32 bytes; bytes 4j..4j+3 of vector i are row
// j's weights 4i..4i+3), sm [G, nb, 8] float16 scales
struct Q8I8 {
  static constexpr bool kMin = false;
  static constexpr int64_t kBytes = 256;
  static __m256i vec(const uint8_t* p, int i) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * i)); }
  // the wide shape's block: as stored, or offset to unsigned (isa::kQ8Offset)
  static void unpack(const uint8_t* p, __m256i* w) {
    for (int i = 0; i < 8; ++i) w[i] = isa::kQ8Offset ? _mm256_xor_si256(vec(p, i), _mm256_set1_epi8(-128)) : vec(p, i);
  }
  static __m256i dot(const __m256i* w, const int8_t* x) { return isa::dot_q8_block(w, x); }
};

// One block of one row of x: acc += its integer dot products (8 output rows) x weight scale x activation scale,
// and for Q4 (kMin) macc += the 8 rows' mins (s + 8) x the activation block sum
template <bool kMin>
inline void scale_into(__m256i dot, const uint16_t* s, __m256 dw, float xd, float xs, __m256& acc, __m256& macc) {
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(xd)), acc);
  if (kMin) macc = _mm256_fmadd_ps(load_f16x8(s + 8), _mm256_set1_ps(xs), macc);
}

// The lean shape's (isa::kLeanRows) scaling of one block's integer dot products into a row's accumulator; the
// Q4 mins' term is summed afterwards by store_lean, so acc and macc see the wide shape's operations in its order
inline void scale_dot(__m256i dot, __m256 dw, float xd, __m256& acc) {
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(xd)), acc);
}

// y[m, n0 .. n0 + 8) = acc[m] (+ macc[m], the Q4 mins' term), the last group cut at N. Unrolled, as i8_group's and
// int16_zmm.h's loops over their rows' accumulators: a rolled loop indexes the array, and GCC then kept a stack copy
// of every row's accumulators beside the registers, stored each block (16 stores a block at 8 rows). The same bits:
// q4_linear_i8 1.88 -> 1.75-1.80 ns a block-row at 8-64 rows, the 512-bit int16 pass 2.84 -> 2.72-2.79 (Zen 4,
// bench/int_products.py); whole steps of 6 / 16 / 64 rows 7.0 / 17.2 / 61.6 -> 6.6 / 16.2 / 59.1 ms, 1-4 level
template <int M, bool kMin>
inline void store_rows(const __m256* acc, const __m256* macc, float* y, int64_t N, int64_t n0) {
  const int64_t valid = std::min<int64_t>(8, N - n0);
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    const __m256 r = kMin ? _mm256_add_ps(acc[m], macc[m]) : acc[m];
    if (valid == 8) {
      _mm256_storeu_ps(y + m * N + n0, r);
    } else {
      float t[8];
      _mm256_storeu_ps(t, r);
      std::memcpy(y + m * N + n0, t, valid * sizeof(float));
    }
  }
}

// The lean shape's last step: for Q4 (kMin) the mins' term of every block in a second, short pass (macc[m] as
// scale_into sums it, block by block), then y = acc (+ macc) as store_rows writes it
template <int M, bool kMin>
inline void store_lean(__m256* acc, const uint16_t* smg, const float* xs, int64_t nb, float* y, int64_t N, int64_t n0) {
  if constexpr (kMin) {
    __m256 macc[M];
    for (int m = 0; m < M; ++m) macc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const __m256 mn = load_f16x8(smg + b * 16 + 8);
      for (int m = 0; m < M; ++m) macc[m] = _mm256_fmadd_ps(mn, _mm256_set1_ps(xs[m * nb + b]), macc[m]);
    }
    store_rows<M, true>(acc, macc, y, N, n0);
  } else {
    store_rows<M, false>(acc, acc, y, N, n0);  // macc unused
  }
}

// y[m, 8 rows of group grp] for M rows of quantized x (xq [M, K], xd/xs [M, nb])
template <int M, typename F>
void i8_group(const uint8_t* wg, const uint16_t* smg, const int8_t* xq, const float* xd, const float* xs, float* y, int64_t K,
              int64_t N, int64_t n0) {
  const int64_t nb = K / 32;
  __m256 acc[M], macc[M];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) acc[m] = macc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_weights<M, F::kBytes>(wg + b * F::kBytes);
    __m256i w[8];
    F::unpack(wg + b * F::kBytes, w);
    const uint16_t* s = smg + b * (F::kMin ? 16 : 8);
    const __m256 dw = load_f16x8(s);
#pragma GCC unroll 8  // every row's accumulators in registers (rolled, GCC kept them on the stack: 1.06x at 8+ rows)
    for (int m = 0; m < M; ++m) {
      __m256i dot = F::dot(w, xq + m * K + b * 32);
      if constexpr (!F::kMin && isa::kQ8Offset)  // xs holds sum(x) here (I8Act::quantize's count)
        dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(128 * static_cast<int32_t>(xs[m * nb + b])));
      scale_into<F::kMin>(dot, s, dw, xd[m * nb + b], xs[m * nb + b], acc[m], macc[m]);
    }
  }
  store_rows<M, F::kMin>(acc, macc, y, N, n0);
}

// The lean kernels' (isa::kLeanRows) two guards against GCC's code for them. Compiled inline (seen in a standalone
// copy of the 4-row group), every row's products were hoisted ahead of their sums and spilled to the stack; a
// noinline group per row count, with each row's chain pinned to a register once a weight vector has
// served it (``pin``: an empty asm that must see the value there, so the sums stay in the source's order), keeps
// the chains in registers. On the Zen 3 EPYC (family 25 model 1), one thread, gate_up in L3: int8 at 4 rows 3.84
// -> 3.11 ns a block of 8 outputs a row, int16 at 1 / 2 rows 9.3 -> 8.4 / 7.5 -> 6.2; whole steps of 1 / 2 / 3
// rows 1.02-1.04x / 1.04-1.13x / 1.08-1.10x (bench/kernel_ab.py). The same bits: only the schedule moves.
#define SGLANG_LEAN_GROUP __attribute__((noinline))
inline void pin(__m256i& v) { __asm__("" : "+x"(v)); }

// the 4 bytes at p in every 32-bit lane (4 int8 activations, or a pair of int16 ones)
inline __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// i8_group in the lean shape (isa::kLeanRows): each weight vector serves every row before the next is unpacked,
// one integer chain and one float accumulator a row while the blocks stream (Q4: pairs of vpmaddubsw summed in
// int16, eight of them fit as in isa::dot_q4_block; Q8_0: |w| against sign(x, w), widened per vector as in
// isa::dot_q8_block), the Q4 mins' term after them: the same bits as i8_group, row by row
template <int M, typename F>
SGLANG_LEAN_GROUP void i8_group_lean(const uint8_t* wg, const uint16_t* smg, const int8_t* xq, const float* xd, const float* xs, float* y, int64_t K,
                   int64_t N, int64_t n0) {
  const int64_t nb = K / 32;
  const __m256i one = _mm256_set1_epi16(1);
  __m256 acc[M];
  for (int m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = wg + b * F::kBytes;
    prefetch_weights<M, F::kBytes>(wb);
    const int8_t* xb = xq + b * 32;
    __m256i s[M];
    if constexpr (F::kMin) {
      for (int g = 0; g < 4; ++g) {
        __m256i lo, hi;
        F::unpack_pair(wb, g, &lo, &hi);
        for (int m = 0; m < M; ++m) {
          const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(xb + m * K + 8 * g)),
                                             _mm256_maddubs_epi16(hi, bcast4(xb + m * K + 8 * g + 4)));
          s[m] = g == 0 ? p : _mm256_add_epi16(s[m], p);
          pin(s[m]);
        }
      }
      for (int m = 0; m < M; ++m) s[m] = _mm256_madd_epi16(s[m], one);
    } else {
      for (int i = 0; i < 8; ++i) {
        const __m256i w = F::vec(wb, i), aw = _mm256_sign_epi8(w, w);
        for (int m = 0; m < M; ++m) {
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(xb + m * K + 4 * i), w)), one);
          s[m] = i == 0 ? p : _mm256_add_epi32(s[m], p);
          pin(s[m]);
        }
      }
    }
    const __m256 dw = load_f16x8(smg + b * (F::kMin ? 16 : 8));
    for (int m = 0; m < M; ++m) scale_dot(s[m], dw, xd[m * nb + b], acc[m]);
  }
  store_lean<M, F::kMin>(acc, smg, xs, nb, y, N, n0);
}

// The int8 activations for quant_linear.h's driver
struct I8Act {
  using T = int8_t;
  static constexpr const char* kName = "int8";
  static constexpr int kMaxRows = isa::kMaxRows;  // rows of x one unpacked weight block serves from registers
  // `count`: the input of a Q8_0 product, whose s is sum(q) (quantize_block32)
  static void quantize(const float* x, T* q, float* d, float* s, bool count = false) { quantize_block32(x, q, d, s, count); }
  template <int M, typename F>
  static void group(const uint8_t* wg, const uint16_t* smg, const T* xq, const float* xd, const float* xs, float* y, int64_t K,
                    int64_t N, int64_t n0) {
    if constexpr (isa::kLeanRows) i8_group_lean<M, F>(wg, smg, xq, xd, xs, y, K, N, n0);
    else i8_group<M, F>(wg, smg, xq, xd, xs, y, K, N, n0);
  }
};

}  // namespace
