// Integer products on the GGUF's blocks (q4_linear_i8, q8_linear_i8), as llama.cpp computes Q4 x Q8:
// the activations are quantized once per call to int8 in blocks of 32 (a float32 scale
// d = absmax / 127 and s = d * sum(q), llama.cpp's Q8_1), and every block of 32 products is an int8
// dot product (isa::dot_q4_block / dot_q8_block: the family's instructions) scaled in float32:
//   Q4_0/Q4_1 (w = dw * q + mw, q unsigned 0..15):  sum w x ~= dw * dx * sum(q * a) + mw * sx
//   Q8_0 (w = dw * q, q signed):                     sum w x ~= dw * dx * sum(q * a)
// The weights are repacked once at load (q4_packed.pack_i8 / pack_q8_i8) into groups of 8 output
// rows interleaved 4 bytes at a time, so lane j of every int32 vector is output row j: a block's
// sums come out of the dot products already one per row (no horizontal sums), and the block's 8
// weight scales and mins are one vector each. Each unpacked block serves up to isa::kMaxRows rows of
// x held in registers (register-blocked GEMM); groups of 8 output rows run in parallel.
// Included by decode_step.cpp.
#pragma once
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "isa_family.h"

namespace {

// 32 floats -> 32 int8 (x * 127 / absmax rounded to nearest even, as llama.cpp's quantize_row_q8_1),
// *d = absmax / 127, *s = *d * sum of the int8 values
inline void quantize_block32(const float* x, int8_t* q, float* d, float* s) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 v[4];
  for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
  __m256 a = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                           _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float amax = _mm_cvtss_f32(m);
  const __m256 id = _mm256_set1_ps(amax > 0.f ? 127.f / amax : 0.f);
  __m256i r[4];
  for (int i = 0; i < 4; ++i) r[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));  // |r| <= 127, nearest even (MXCSR default)
  const __m256i sum8 = _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
  // int32 -> int8 in order: the packs interleave 128-bit lanes, the permutation undoes it
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  *d = amax / 127.f;
  *s = *d * static_cast<float>(_mm_cvtsi128_si32(t));
}

// Q4 repacked: w [G, nb * 128] bytes (group of 8 rows, block b: 4 vectors of 32 bytes; byte 4j + i of
// vector g holds row j's weight 8g + i in the low nibble and 8g + 4 + i in the high one),
// sm [G, nb, 2, 8] float32 (the 8 rows' scales, then their mins)
struct Q4I8 {
  static constexpr bool kMin = true;
  static constexpr int64_t kBytes = 128;  // per block of 8 rows
  static void unpack(const uint8_t* p, __m256i* w) {
    const __m256i lo = _mm256_set1_epi8(15);
    for (int g = 0; g < 4; ++g) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * g));
      w[2 * g] = _mm256_and_si256(v, lo);
      w[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo);
    }
  }
  static __m256i dot(const __m256i* w, const __m256i* x4) { return isa::dot_q4_block(w, x4); }
};

// Q8_0 repacked: w [G, nb * 256] (block b: 8 vectors of 32 bytes; bytes 4j..4j+3 of vector i are row
// j's weights 4i..4i+3), sm [G, nb, 8] float32 scales
struct Q8I8 {
  static constexpr bool kMin = false;
  static constexpr int64_t kBytes = 256;
  static void unpack(const uint8_t* p, __m256i* w) {
    for (int i = 0; i < 8; ++i) w[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * i));
  }
  static __m256i dot(const __m256i* w, const __m256i* x4) { return isa::dot_q8_block(w, x4); }
};

// y[m, 8 rows of group grp] for M rows of quantized x (xq [M, K], xd/xs [M, nb])
template <int M, typename F>
void i8_group(const uint8_t* wg, const float* smg, const int8_t* xq, const float* xd, const float* xs, float* y, int64_t K,
              int64_t N, int64_t n0) {
  const int64_t nb = K / 32;
  __m256 acc[M], macc[M];
  for (int m = 0; m < M; ++m) acc[m] = macc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i w[8];
    F::unpack(wg + b * F::kBytes, w);
    const float* s = smg + b * (F::kMin ? 16 : 8);
    const __m256 dw = _mm256_loadu_ps(s);
    for (int m = 0; m < M; ++m) {
      const int8_t* xb = xq + m * K + b * 32;
      __m256i x4[8];
      for (int i = 0; i < 8; ++i) {
        int32_t v;
        std::memcpy(&v, xb + 4 * i, 4);
        x4[i] = _mm256_set1_epi32(v);
      }
      const __m256 p = _mm256_cvtepi32_ps(F::dot(w, x4));
      acc[m] = _mm256_fmadd_ps(p, _mm256_mul_ps(dw, _mm256_set1_ps(xd[m * nb + b])), acc[m]);
      if (F::kMin) macc[m] = _mm256_fmadd_ps(_mm256_loadu_ps(s + 8), _mm256_set1_ps(xs[m * nb + b]), macc[m]);
    }
  }
  const int64_t valid = std::min<int64_t>(8, N - n0);
  for (int m = 0; m < M; ++m) {
    const __m256 r = F::kMin ? _mm256_add_ps(acc[m], macc[m]) : acc[m];
    if (valid == 8) {
      _mm256_storeu_ps(y + m * N + n0, r);
    } else {
      float t[8];
      _mm256_storeu_ps(t, r);
      std::memcpy(y + m * N + n0, t, valid * sizeof(float));
    }
  }
}

template <typename F>
void i8_rows(const uint8_t* wg, const float* smg, const int8_t* xq, const float* xd, const float* xs, float* y, int64_t M, int64_t K,
             int64_t N, int64_t n0) {
  switch (M) {
    case 1: i8_group<1, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 2: i8_group<2, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 3: i8_group<3, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 4: i8_group<4, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
#if defined(SGLANG_ISA_AVX512_VNNI)
    case 5: i8_group<5, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 6: i8_group<6, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 7: i8_group<7, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 8: i8_group<8, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
#endif
    default: TORCH_CHECK(false, "int8 row chunk of ", M, " rows exceeds ", isa::kMaxRows);
  }
}

// y = x @ W.T for float32 x [M, K] and a repacked weight of N rows (G = ceil(N / 8) groups)
template <typename F>
at::Tensor linear_i8(const at::Tensor& x_in, const at::Tensor& w, const at::Tensor& sm, int64_t N) {
  const at::Tensor x = x_in.contiguous();
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.dim() == 2, "the int8 kernels take float32 x [M, K]");
  const int64_t M = x.size(0), K = x.size(1), nb = K / 32, G = (N + 7) / 8;
  TORCH_CHECK(M >= 1, "the int8 kernels take at least one row");
  TORCH_CHECK(K % 32 == 0 && N >= 1 && w.dim() == 2 && w.size(0) == G && w.size(1) == nb * F::kBytes && w.is_contiguous(),
              "the int8 kernels take x [M, K] against a repacked weight [", G, ", ", nb * F::kBytes, "] for K = ", K, ", got ", w.sizes());
  TORCH_CHECK(sm.scalar_type() == at::kFloat && sm.is_contiguous() && sm.numel() == G * nb * (F::kMin ? 16 : 8),
              "the int8 kernels' scales must be contiguous float32 [", G, ", ", nb, F::kMin ? ", 2, 8]" : ", 8]");
  // the activations, quantized once for every output row; on one thread (about 10 ns a block: a
  // parallel region of its own would add a second fork/join to every product)
  std::vector<int8_t> xq(M * K);
  std::vector<float> xd(M * nb), xs(M * nb);
  const float* xp = x.data_ptr<float>();
  for (int64_t i = 0; i < M * nb; ++i) quantize_block32(xp + i * 32, xq.data() + i * 32, &xd[i], &xs[i]);
  at::Tensor y = at::empty({M, N}, x.options());
  float* yp = y.data_ptr<float>();
  const uint8_t* wp = static_cast<const uint8_t*>(w.data_ptr());
  const float* sp = sm.data_ptr<float>();
  const int64_t chunks = (M + isa::kMaxRows - 1) / isa::kMaxRows;
  at::parallel_for(0, G, 8, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const uint8_t* wg = wp + g * nb * F::kBytes;
      const float* smg = sp + g * nb * (F::kMin ? 16 : 8);
      for (int64_t c = 0, m0 = 0; c < chunks; ++c) {
        const int64_t m1 = M * (c + 1) / chunks;  // chunk sizes differ by at most one row
        i8_rows<F>(wg, smg, xq.data() + m0 * K, xd.data() + m0 * nb, xs.data() + m0 * nb, yp + m0 * N, m1 - m0, K, N, g * 8);
        m0 = m1;
      }
    }
  });
  return y;
}

at::Tensor q4_linear_i8(const at::Tensor& x, const at::Tensor& w, const at::Tensor& sm, int64_t N) {
  TORCH_CHECK(w.scalar_type() == at::kByte, "a repacked Q4 weight is uint8");
  return linear_i8<Q4I8>(x, w, sm, N);
}

at::Tensor q8_linear_i8(const at::Tensor& x, const at::Tensor& w, const at::Tensor& sm, int64_t N) {
  TORCH_CHECK(w.scalar_type() == at::kChar, "a repacked Q8_0 weight is int8");
  return linear_i8<Q8I8>(x, w, sm, N);
}

}  // namespace
