// Integer products on the GGUF's blocks (q4_linear_i8, q8_linear_i8): the
// activations are quantized once per call to int8 in blocks of 32 (a float32
// scale d = absmax / 127 and s = d * sum(q), as llama.cpp's Q8_1 keeps), and
// every block of 32 products is one int8 dot product (isa::dot_u8s8: the
// family's instructions) scaled by weight scale x activation scale:
//   Q4_0/Q4_1 (w = dw * q + mw, q unsigned 0..15):
//     sum w x ~= dw * dx * sum(q * a) + mw * sx
//   Q8_0 (w = dw * q, q signed): the sign trick, |q| against sign(a, q).
// The weights stay in the GGUF's own layout, exactly the tensors the float32
// kernels read (one copy serves both): a block's 16 nibble bytes hold weights
// 0-15 (low) and 16-31 (high), so the two halves of one register are the
// block in order. Output columns in parallel, 16 at a time; the rows of x in
// balanced chunks of at most 8, each weight block unpacked once per chunk and
// reused across its rows (register-blocked: 8 accumulators). Included by
// decode_step.cpp.
#pragma once
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "isa_family.h"
#include "vec.h"

namespace {

// 32 floats -> 32 int8 (round to nearest even), *d = absmax / 127, *s = *d * sum
inline void quantize_block32(const float* x, int8_t* q, float* d, float* s) {
  float amax = 0.f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float id = amax > 0.f ? 127.f / amax : 0.f;
  int32_t sum = 0;
  for (int i = 0; i < 32; ++i) {
    const int32_t v = static_cast<int32_t>((x[i] * id + 12582912.f) - 12582912.f);  // |x * id| <= 127
    q[i] = static_cast<int8_t>(v);
    sum += v;
  }
  *d = amax / 127.f;
  *s = *d * static_cast<float>(sum);
}

// GGUF Q4_0/Q4_1 as nibbles [N, K/2] and (scale, min) [N, K/32, 2]: the float32 kernels' tensors
struct Q4I8Rows {
  static constexpr bool kSigned = false;
  const uint8_t* nib;
  const float* sm;
  int64_t K;
  __m256i load(int64_t n, int64_t b) const {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(nib + n * (K / 2) + b * 16));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15));
  }
  float scale(int64_t n, int64_t b) const { return sm[(n * (K / 32) + b) * 2]; }
  float offset(int64_t n, int64_t b) const { return sm[(n * (K / 32) + b) * 2 + 1]; }
};

// GGUF Q8_0 as int8 [N, K] and scale [N, K/32]
struct Q8I8Rows {
  static constexpr bool kSigned = true;
  const int8_t* q;
  const float* sc;
  int64_t K;
  __m256i load(int64_t n, int64_t b) const { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + n * K + b * 32)); }
  float scale(int64_t n, int64_t b) const { return sc[n * (K / 32) + b]; }
  float offset(int64_t, int64_t) const { return 0.f; }
};

// Output columns [n0, n0 + rows) of y[M, N] for M quantized rows (xq [M, K], xd/xs [M, K/32])
template <int64_t M, typename Rows>
void i8_block(const Rows& w, const int8_t* xq, const float* xd, const float* xs, float* yp, int64_t K, int64_t N, int64_t n0,
              int64_t rows) {
  constexpr int64_t C = M == 1 ? 2 : 1;  // a batch of 1 alternates two accumulators (FMA latency)
  const int64_t nb = K / 32;
  vf8 part[M * 16];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = n0 + r;
    __m256 acc[M][C];
    float off[M];
    for (int64_t m = 0; m < M; ++m) {
      off[m] = 0.f;
      for (int64_t c = 0; c < C; ++c) acc[m][c] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i wv = w.load(n, b);
      const __m256i wu = Rows::kSigned ? _mm256_sign_epi8(wv, wv) : wv;
      const float dw = w.scale(n, b), mw = w.offset(n, b);
      for (int64_t m = 0; m < M; ++m) {
        __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + m * K + b * 32));
        if (Rows::kSigned) av = _mm256_sign_epi8(av, wv);
        const __m256 p = _mm256_cvtepi32_ps(isa::dot_u8s8(wu, av));
        acc[m][b % C] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * xd[m * nb + b]), acc[m][b % C]);
        if (!Rows::kSigned) off[m] += mw * xs[m * nb + b];
      }
    }
    for (int64_t m = 0; m < M; ++m) {
      __m256 t = acc[m][0];
      for (int64_t c = 1; c < C; ++c) t = _mm256_add_ps(t, acc[m][c]);
      vf8 v;
      std::memcpy(&v, &t, sizeof(v));
      v[0] += off[m];
      part[m * 16 + r] = v;
    }
  }
  for (int64_t m = 0; m < M; ++m) {
    if (rows == 16) {
      const vf8 s0 = lane_sums8(&part[m * 16]), s1 = lane_sums8(&part[m * 16 + 8]);
      std::memcpy(yp + m * N + n0, &s0, sizeof(s0));
      std::memcpy(yp + m * N + n0 + 8, &s1, sizeof(s1));
    } else {
      for (int64_t r = 0; r < rows; ++r) yp[m * N + n0 + r] = hsum8(part[m * 16 + r]);
    }
  }
}

template <typename Rows>
void i8_rows(const Rows& w, const int8_t* xq, const float* xd, const float* xs, float* yp, int64_t M, int64_t K, int64_t N, int64_t n0,
             int64_t rows) {
  switch (M) {
    case 1: i8_block<1>(w, xq, xd, xs, yp, K, N, n0, rows); break;
    case 2: i8_block<2>(w, xq, xd, xs, yp, K, N, n0, rows); break;
    case 3: i8_block<3>(w, xq, xd, xs, yp, K, N, n0, rows); break;
    case 4: i8_block<4>(w, xq, xd, xs, yp, K, N, n0, rows); break;
    case 5: i8_block<5>(w, xq, xd, xs, yp, K, N, n0, rows); break;
    case 6: i8_block<6>(w, xq, xd, xs, yp, K, N, n0, rows); break;
    case 7: i8_block<7>(w, xq, xd, xs, yp, K, N, n0, rows); break;
    default: i8_block<8>(w, xq, xd, xs, yp, K, N, n0, rows); break;
  }
}

template <typename Rows>
at::Tensor packed_linear_i8(const at::Tensor& x_in, const Rows& w, int64_t N) {
  const at::Tensor x = x_in.contiguous();
  const int64_t M = x.size(0), K = x.size(1), nb = K / 32;
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.dim() == 2 && K == w.K, "the int8 kernels take float32 x [M, ", w.K, "]");
  TORCH_CHECK(M >= 1, "the int8 kernels take at least one row");
  // the activations, quantized once for every output column
  std::vector<int8_t> xq(M * K);
  std::vector<float> xd(M * nb), xs(M * nb);
  const float* xp = x.data_ptr<float>();
  at::parallel_for(0, M * nb, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) quantize_block32(xp + i * 32, xq.data() + i * 32, &xd[i], &xs[i]);
  });
  at::Tensor y = at::empty({M, N}, x.options());
  float* yp = y.data_ptr<float>();
  const int64_t chunks = (M + 7) / 8;
  at::parallel_for(0, (N + 15) / 16, 16, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t n0 = blk * 16, rows = std::min<int64_t>(16, N - n0);
      for (int64_t c = 0, m0 = 0; c < chunks; ++c) {
        const int64_t m1 = M * (c + 1) / chunks;  // chunk sizes differ by at most one row
        i8_rows(w, xq.data() + m0 * K, xd.data() + m0 * nb, xs.data() + m0 * nb, yp + m0 * N, m1 - m0, K, N, n0, rows);
        m0 = m1;
      }
    }
  });
  return y;
}

at::Tensor q4_linear_i8(const at::Tensor& x, const at::Tensor& nib, const at::Tensor& sm) {
  const int64_t N = nib.size(0), K = nib.size(1) * 2;
  TORCH_CHECK(nib.scalar_type() == at::kByte && sm.scalar_type() == at::kFloat && nib.is_contiguous() && sm.is_contiguous(),
              "a Q4 weight is contiguous uint8 nibbles and float32 scale/min");
  TORCH_CHECK(K % 32 == 0 && sm.dim() == 3 && sm.size(0) == N && sm.size(1) == K / 32 && sm.size(2) == 2,
              "Q4 scale/min must be [", N, ", ", K / 32, ", 2]");
  return packed_linear_i8(x, Q4I8Rows{nib.data_ptr<uint8_t>(), sm.data_ptr<float>(), K}, N);
}

at::Tensor q8_linear_i8(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scale) {
  const int64_t N = q.size(0), K = q.size(1);
  TORCH_CHECK(q.scalar_type() == at::kChar && scale.scalar_type() == at::kFloat && q.is_contiguous() && scale.is_contiguous(),
              "a Q8_0 weight is contiguous int8 values and float32 scales");
  TORCH_CHECK(K % 32 == 0 && scale.dim() == 2 && scale.size(0) == N && scale.size(1) == K / 32, "Q8_0 scales must be [", N, ", ", K / 32, "]");
  return packed_linear_i8(x, Q8I8Rows{q.data_ptr<int8_t>(), scale.data_ptr<float>(), K}, N);
}

}  // namespace
