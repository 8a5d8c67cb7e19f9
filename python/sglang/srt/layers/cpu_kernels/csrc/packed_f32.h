// The packed float32 products (q4_linear_f32, q8_linear_f32): GGUF Q4/Q8_0
// blocks decoded to their exact float32 values in registers, float32 FMAs.
// The reference-exact kernels on the GGUF's blocks (only the summation order
// differs from the dense product). Included by decode_step.cpp.
#pragma once
#include <ATen/Parallel.h>

#include <algorithm>

#include "vec.h"

namespace {

// Row decoders for the packed float32 products below: the 32 weights of block
// b of weight row n as four vectors of 8, as the float32 values the gguf
// package dequantizes (exactly: see each one).

// GGUF Q4_0/Q4_1: nib [N, K/2] (byte i of a block: weight i in the low nibble,
// weight i + 16 in the high one, as GGUF stores them), sm [N, K/32, 2]
// (scale, min). fma(scale, q, min) with q < 16 and a float16 scale has an
// exact product: Q4_1's scale * q + min, Q4_0's scale * (q - 8) (min = -8 * scale).
struct Q4Rows {
  const uint8_t* nib;
  const float* sm;
  int64_t K;
  void operator()(int64_t n, int64_t b, vf8* w) const {
    const uint8_t* p = nib + n * (K / 2) + b * 16;
    const float* s = sm + (n * (K / 32) + b) * 2;
    const vi8 b0 = widen_u8(p), b1 = widen_u8(p + 8);  // byte i: weight i (low nibble), weight i + 16 (high)
    w[0] = s[0] * to_f(b0 & 15) + s[1];
    w[1] = s[0] * to_f(b1 & 15) + s[1];
    w[2] = s[0] * to_f(b0 >> 4) + s[1];
    w[3] = s[0] * to_f(b1 >> 4) + s[1];
  }
};

// GGUF Q8_0: q int8 [N, K], scale [N, K/32]; scale * q is exact in float32.
struct Q8Rows {
  const int8_t* q;
  const float* scale;
  int64_t K;
  void operator()(int64_t n, int64_t b, vf8* w) const {
    const int8_t* p = q + n * K + b * 32;
    const float s = scale[n * (K / 32) + b];
    for (int i = 0; i < 4; ++i) w[i] = to_f(widen_i8(p + 8 * i)) * s;
  }
};

// Output columns [n0, n0 + rows) of y[M, N] = x[M, K] @ W.T, rows <= 16, for a
// compile-time M so the M accumulators stay in registers; the 16 columns' sums
// come out of two transposing reductions.
template <int64_t M, typename Rows>
void packed_block(const Rows& w, const float* xp, float* yp, int64_t K, int64_t N, int64_t n0, int64_t rows) {
  // C accumulators per row of x: M * C independent FMA chains hide the FMA
  // latency (one chain per row made a batch of 1 latency-bound: 4x slower)
  constexpr int64_t C = M <= 2 ? 4 : (M <= 5 ? 2 : 1);
  vf8 part[M * 16];
  for (int64_t r = 0; r < rows; ++r) {
    vf8 acc[M][C] = {};
    for (int64_t b = 0; b < K / 32; ++b) {
      vf8 wv[4];
      w(n0 + r, b, wv);
      for (int64_t m = 0; m < M; ++m) {
        const float* xb = xp + m * K + b * 32;
        for (int64_t i = 0; i < 4; ++i) acc[m][i % C] += wv[i] * load8(xb + 8 * i);
      }
    }
    for (int64_t m = 0; m < M; ++m) {
      vf8 t = acc[m][0];
      for (int64_t c = 1; c < C; ++c) t += acc[m][c];
      part[m * 16 + r] = t;
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

// packed_block for a runtime M in [1, 8]
template <typename Rows>
void packed_rows(const Rows& w, const float* xp, float* yp, int64_t M, int64_t K, int64_t N, int64_t n0, int64_t rows) {
  switch (M) {
    case 1: packed_block<1>(w, xp, yp, K, N, n0, rows); break;
    case 2: packed_block<2>(w, xp, yp, K, N, n0, rows); break;
    case 3: packed_block<3>(w, xp, yp, K, N, n0, rows); break;
    case 4: packed_block<4>(w, xp, yp, K, N, n0, rows); break;
    case 5: packed_block<5>(w, xp, yp, K, N, n0, rows); break;
    case 6: packed_block<6>(w, xp, yp, K, N, n0, rows); break;
    case 7: packed_block<7>(w, xp, yp, K, N, n0, rows); break;
    default: packed_block<8>(w, xp, yp, K, N, n0, rows); break;
  }
}

// y = x @ W.T for float32 x [M, K] and a packed weight of N rows: the dense
// float32 product over the very same weights, in another summation order.
// Output columns in parallel, 16 at a time; the rows of x in balanced chunks
// of at most 8 (6 for rows longer than 768, so that a chunk stays in L1), each
// chunk decoding the 16 weight rows afresh from their packed blocks. Decoding
// a block once to a float32 scratch for every chunk measured 1.2-2.7x slower
// at 9-64 rows (the scratch spills L1; the packed rows do not), and an uneven
// last chunk (8 + 1 for 9 rows) cost up to 2x.
template <typename Rows>
at::Tensor packed_linear_f32(const at::Tensor& x_in, const Rows& w, int64_t N) {
  const at::Tensor x = x_in.contiguous();
  const int64_t M = x.size(0), K = x.size(1);
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.dim() == 2 && K == w.K, "the packed float32 kernels take float32 x [M, ", w.K, "]");
  TORCH_CHECK(M >= 1, "the packed float32 kernels take at least one row");
  at::Tensor y = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t most = K <= 768 ? 8 : 6, chunks = (M + most - 1) / most;
  at::parallel_for(0, (N + 15) / 16, 16, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t n0 = blk * 16, rows = std::min<int64_t>(16, N - n0);
      for (int64_t c = 0, m0 = 0; c < chunks; ++c) {
        const int64_t m1 = M * (c + 1) / chunks;  // chunk sizes differ by at most one row
        packed_rows(w, xp + m0 * K, yp + m0 * N, m1 - m0, K, N, n0, rows);
        m0 = m1;
      }
    }
  });
  return y;
}

at::Tensor q4_linear_f32(const at::Tensor& x, const at::Tensor& nib, const at::Tensor& sm) {
  const int64_t N = nib.size(0), K = nib.size(1) * 2;
  TORCH_CHECK(nib.scalar_type() == at::kByte && sm.scalar_type() == at::kFloat && nib.is_contiguous() && sm.is_contiguous(),
              "a float32 Q4 weight is contiguous uint8 nibbles and float32 scale/min");
  TORCH_CHECK(K % 32 == 0 && sm.dim() == 3 && sm.size(0) == N && sm.size(1) == K / 32 && sm.size(2) == 2,
              "Q4 scale/min must be [", N, ", ", K / 32, ", 2]");
  return packed_linear_f32(x, Q4Rows{nib.data_ptr<uint8_t>(), sm.data_ptr<float>(), K}, N);
}

at::Tensor q8_linear_f32(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scale) {
  const int64_t N = q.size(0), K = q.size(1);
  TORCH_CHECK(q.scalar_type() == at::kChar && scale.scalar_type() == at::kFloat && q.is_contiguous() && scale.is_contiguous(),
              "a float32 Q8_0 weight is contiguous int8 values and float32 scales");
  TORCH_CHECK(K % 32 == 0 && scale.dim() == 2 && scale.size(0) == N && scale.size(1) == K / 32, "Q8_0 scales must be [", N, ", ", K / 32, "]");
  return packed_linear_f32(x, Q8Rows{q.data_ptr<int8_t>(), scale.data_ptr<float>(), K}, N);
}
}  // namespace
