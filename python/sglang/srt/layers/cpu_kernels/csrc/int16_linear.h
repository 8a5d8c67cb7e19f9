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
// Included by decode_step.cpp after int8_linear.h.
#pragma once
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "isa_family.h"

namespace {

// 32 floats -> 32 int16 (x * 32767 / absmax, nearest even), *d = absmax / 32767, *s = *d * sum of the int16 values
inline void quantize_block32_i16(const float* x, int16_t* q, float* d, float* s) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 v[4];
  for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
  __m256 a = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                           _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float amax = _mm_cvtss_f32(m);
  const __m256 id = _mm256_set1_ps(amax > 0.f ? 32767.f / amax : 0.f);
  __m256i r[4];
  for (int i = 0; i < 4; ++i) r[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));  // |r| <= 32767
  const __m256i sum8 = _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
  // packs interleaves 128-bit lanes ([a0-3, b0-3, a4-7, b4-7]); the 64-bit permutation puts them in order
  for (int h = 0; h < 2; ++h)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 16 * h),
                        _mm256_permute4x64_epi64(_mm256_packs_epi32(r[2 * h], r[2 * h + 1]), 0xD8));
  *d = amax / 32767.f;
  *s = *d * static_cast<float>(_mm_cvtsi128_si32(t));
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

inline __m256i bcast_pair(const int16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// y[m, 8 rows of group grp] for M rows of int16 x (xq [M, K], xd/xs [M, nb])
template <int M, typename F>
void i16_group(const uint8_t* wg, const float* smg, const int16_t* xq, const float* xd, const float* xs, float* y, int64_t K,
               int64_t N, int64_t n0) {
  const int64_t nb = K / 32;
  __m256 acc[M], macc[M];
  for (int m = 0; m < M; ++m) acc[m] = macc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = wg + b * F::kBytes;
    __m256i sa[M], sc[M];  // two int32 chains per row of x (the pairs' halves)
    for (int m = 0; m < M; ++m) sa[m] = sc[m] = _mm256_setzero_si256();
    for (int i = 0; i < 8; ++i) {
      __m256i a, c;
      F::widen(F::load(wb, i), &a, &c);
      for (int m = 0; m < M; ++m) {
        const int16_t* xb = xq + m * K + b * 32 + 4 * i;
        sa[m] = isa::dot_i16(sa[m], a, bcast_pair(xb));
        sc[m] = isa::dot_i16(sc[m], c, bcast_pair(xb + 2));
      }
    }
    const float* s = smg + b * (F::kMin ? 16 : 8);
    const __m256 dw = _mm256_loadu_ps(s);
    for (int m = 0; m < M; ++m) {
      const __m256 p = _mm256_cvtepi32_ps(_mm256_add_epi32(sa[m], sc[m]));
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
void i16_rows(const uint8_t* wg, const float* smg, const int16_t* xq, const float* xd, const float* xs, float* y, int64_t M,
              int64_t K, int64_t N, int64_t n0) {
  switch (M) {
    case 1: i16_group<1, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 2: i16_group<2, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 3: i16_group<3, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 4: i16_group<4, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
#if defined(SGLANG_ISA_AVX512_VNNI)
    case 5: i16_group<5, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 6: i16_group<6, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 7: i16_group<7, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 8: i16_group<8, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
#endif
    default: TORCH_CHECK(false, "int16 row chunk of ", M, " rows exceeds ", isa::kMaxRows);
  }
}

// y = x @ W.T for float32 x [M, K] and a weight repacked for the int8 kernels (N rows, G = ceil(N / 8) groups)
template <typename F>
at::Tensor linear_i16(const at::Tensor& x_in, const at::Tensor& w, const at::Tensor& sm, int64_t N) {
  const at::Tensor x = x_in.contiguous();
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.dim() == 2, "the int16 kernels take float32 x [M, K]");
  const int64_t M = x.size(0), K = x.size(1), nb = K / 32, G = (N + 7) / 8;
  TORCH_CHECK(M >= 1, "the int16 kernels take at least one row");
  TORCH_CHECK(K % 32 == 0 && N >= 1 && w.dim() == 2 && w.size(0) == G && w.size(1) == nb * F::kBytes && w.is_contiguous(),
              "the int16 kernels take x [M, K] against a repacked weight [", G, ", ", nb * F::kBytes, "] for K = ", K, ", got ", w.sizes());
  TORCH_CHECK(sm.scalar_type() == at::kFloat && sm.is_contiguous() && sm.numel() == G * nb * (F::kMin ? 16 : 8),
              "the int16 kernels' scales must be contiguous float32 [", G, ", ", nb, F::kMin ? ", 2, 8]" : ", 8]");
  std::vector<int16_t> xq(M * K);  // quantized once for every output row, on one thread (see linear_i8)
  std::vector<float> xd(M * nb), xs(M * nb);
  const float* xp = x.data_ptr<float>();
  for (int64_t i = 0; i < M * nb; ++i) quantize_block32_i16(xp + i * 32, xq.data() + i * 32, &xd[i], &xs[i]);
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
        const int64_t m1 = M * (c + 1) / chunks;
        i16_rows<F>(wg, smg, xq.data() + m0 * K, xd.data() + m0 * nb, xs.data() + m0 * nb, yp + m0 * N, m1 - m0, K, N, g * 8);
        m0 = m1;
      }
    }
  });
  return y;
}

at::Tensor q4_linear_i16(const at::Tensor& x, const at::Tensor& w, const at::Tensor& sm, int64_t N) {
  TORCH_CHECK(w.scalar_type() == at::kByte, "a repacked Q4 weight is uint8");
  return linear_i16<Q4I16>(x, w, sm, N);
}

at::Tensor q8_linear_i16(const at::Tensor& x, const at::Tensor& w, const at::Tensor& sm, int64_t N) {
  TORCH_CHECK(w.scalar_type() == at::kChar, "a repacked Q8_0 weight is int8");
  return linear_i16<Q8I16>(x, w, sm, N);
}

}  // namespace
