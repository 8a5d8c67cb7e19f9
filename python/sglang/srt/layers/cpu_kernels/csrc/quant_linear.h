// The driver of the integer GGUF products (int8_linear.h, int16_linear.h): the activations quantized
// once per call by A (I8Act / I16Act) on one thread (about 10 ns a block: a parallel region of its
// own would add a second fork/join to every product), then groups of 8 output rows in parallel, each
// serving the rows of x in balanced chunks of at most A::kMaxRows (each weight block, unpacked once,
// serves the whole chunk). Included by decode_step.cpp after both.
#pragma once
#include <ATen/Parallel.h>

#include <type_traits>
#include <vector>

#include "isa_family.h"
#include "int16_zmm.h"
#include "amx_int16.h"

namespace {

template <int M, typename A, typename F>
inline void quant_group(const uint8_t* wg, const uint16_t* smg, const typename A::T* xq, const float* xd, const float* xs, float* y,
                        int64_t K, int64_t N, int64_t n0) {
  if constexpr (M <= A::kMaxRows) {
    A::template group<M, F>(wg, smg, xq, xd, xs, y, K, N, n0);
  } else {
    TORCH_CHECK(false, A::kName, " row chunk of ", M, " rows exceeds ", A::kMaxRows);
  }
}

template <typename A, typename F>
void quant_rows(const uint8_t* wg, const uint16_t* smg, const typename A::T* xq, const float* xd, const float* xs, float* y, int64_t M,
                int64_t K, int64_t N, int64_t n0) {
  switch (M) {
    case 1: quant_group<1, A, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 2: quant_group<2, A, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 3: quant_group<3, A, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 4: quant_group<4, A, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 5: quant_group<5, A, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 6: quant_group<6, A, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 7: quant_group<7, A, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    case 8: quant_group<8, A, F>(wg, smg, xq, xd, xs, y, K, N, n0); break;
    default: TORCH_CHECK(false, A::kName, " row chunk of ", M, " rows exceeds ", A::kMaxRows);
  }
}

// A weight repacked in groups of 8 rows for K inputs and N outputs: [ceil(N / 8), K / 32 * F::kBytes]
template <typename F>
inline bool weight_fits(const at::Tensor& w, int64_t K, int64_t N) {
  return K % 32 == 0 && N >= 1 && w.dim() == 2 && w.size(0) == (N + 7) / 8 && w.size(1) == K / 32 * F::kBytes && w.is_contiguous();
}

// its float16 scales (and Q4 mins): [ceil(N / 8), K / 32, (2,) 8], contiguous
template <typename F>
inline bool scales_fit(const at::Tensor& sm, int64_t K, int64_t N) {
  return sm.scalar_type() == at::kHalf && sm.is_contiguous() && sm.numel() == (N + 7) / 8 * (K / 32) * (F::kMin ? 16 : 8);
}

// quant_groups on the family's 256-bit kernels alone: rows in balanced chunks of at most A::kMaxRows
template <typename A, typename F>
void quant_groups_256(const uint8_t* wp, const uint16_t* sp, const typename A::T* xq, const float* xd, const float* xs, float* y,
                      int64_t M, int64_t K, int64_t N, int64_t g0, int64_t g1) {
  const int64_t nb = K / 32, chunks = (M + A::kMaxRows - 1) / A::kMaxRows;
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* wg = wp + g * nb * F::kBytes;
    const uint16_t* smg = sp + g * nb * (F::kMin ? 16 : 8);
    for (int64_t c = 0, m0 = 0; c < chunks; ++c) {
      const int64_t m1 = M * (c + 1) / chunks;  // chunk sizes differ by at most one row
      quant_rows<A, F>(wg, smg, xq + m0 * K, xd + m0 * nb, xs + m0 * nb, y + m0 * N, m1 - m0, K, N, g * 8);
      m0 = m1;
    }
  }
}

// y[:, 8 g0 .. 8 g1) of y [M, N] = x @ W.T for groups g0..g1 of a weight repacked in groups of 8 rows, x
// quantized (xq [M, K], xd/xs [M, K / 32]); the rows of x in balanced chunks of at most A::kMaxRows.
// Throws nothing for valid shapes (team_step.h calls it inside a parallel region).
template <typename A, typename F>
void quant_groups(const uint8_t* wp, const uint16_t* sp, const typename A::T* xq, const float* xd, const float* xs, float* y,
                  int64_t M, int64_t K, int64_t N, int64_t g0, int64_t g1) {
#if defined(SGLANG_ISA_AMX)
  // the same bits on tiles (9+ rows) or in one 512-bit pass (5-8); a last odd or partial group stays on the 256-bit
  // kernels
  if constexpr (std::is_same<A, I16Act>::value) {
    if (M >= amx::kMinRows && amx::enabled()) g0 = amx::i16_pairs<F>(wp, sp, xq, xd, xs, y, M, K, N, g0, g1);
    else if (M >= zmm16::kMinRows && M <= zmm16::kMaxRows) g0 = zmm16::i16_pairs<F>(wp, sp, xq, xd, xs, y, M, K, N, g0, g1);
  }
#elif defined(SGLANG_ISA_AVX512_VNNI)
  // int16 rows in chunks of 5-8 on 512-bit registers, pairs of groups a pass (int16_zmm.h, where the timings are); a
  // chunk of fewer rows, and a last odd or partial group, on the 256-bit kernels
  if constexpr (std::is_same<A, I16Act>::value) {
    if (M >= zmm16::kMinRows) {
      const int64_t nb = K / 32, wide = (M + zmm16::kMaxRows - 1) / zmm16::kMaxRows;
      for (int64_t c = 0, m0 = 0; c < wide; ++c) {
        const int64_t m1 = M * (c + 1) / wide, rows = m1 - m0;  // chunk sizes differ by at most one row
        const int64_t gs = rows >= zmm16::kMinRows
                               ? zmm16::i16_pairs<F>(wp, sp, xq + m0 * K, xd + m0 * nb, xs + m0 * nb, y + m0 * N, rows, K, N, g0, g1)
                               : g0;
        quant_groups_256<A, F>(wp, sp, xq + m0 * K, xd + m0 * nb, xs + m0 * nb, y + m0 * N, rows, K, N, gs, g1);
        m0 = m1;
      }
      return;
    }
  }
#endif
  quant_groups_256<A, F>(wp, sp, xq, xd, xs, y, M, K, N, g0, g1);
}

// y = x @ W.T for float32 x [M, K] and a weight repacked in groups of 8 rows (N rows, G = ceil(N / 8) groups)
template <typename A, typename F>
at::Tensor quant_linear(const at::Tensor& x_in, const at::Tensor& w, const at::Tensor& sm, int64_t N) {
  const at::Tensor x = x_in.contiguous();
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.dim() == 2, "the ", A::kName, " kernels take float32 x [M, K]");
  const int64_t M = x.size(0), K = x.size(1), nb = K / 32, G = (N + 7) / 8;
  TORCH_CHECK(M >= 1, "the ", A::kName, " kernels take at least one row");
  TORCH_CHECK(weight_fits<F>(w, K, N), "the ", A::kName, " kernels take x [M, K] against a repacked weight [", G, ", ",
              nb * F::kBytes, "] for K = ", K, ", got ", w.sizes());
  TORCH_CHECK(scales_fit<F>(sm, K, N), "the ", A::kName, " kernels' scales must be contiguous float16 [", G, ", ", nb,
              F::kMin ? ", 2, 8]" : ", 8]");
  std::vector<typename A::T> xq(M * K);
  std::vector<float> xd(M * nb), xs(M * nb);
  const float* xp = x.data_ptr<float>();
  for (int64_t i = 0; i < M * nb; ++i) A::quantize(xp + i * 32, xq.data() + i * 32, &xd[i], &xs[i], !F::kMin);
  at::Tensor y = at::empty({M, N}, x.options());
  float* yp = y.data_ptr<float>();
  const uint8_t* wp = static_cast<const uint8_t*>(w.data_ptr());
  const uint16_t* sp = reinterpret_cast<const uint16_t*>(sm.data_ptr<at::Half>());
  at::parallel_for(0, G, 8, [&](int64_t begin, int64_t end) {
    quant_groups<A, F>(wp, sp, xq.data(), xd.data(), xs.data(), yp, M, K, N, begin, end);
  });
  return y;
}

at::Tensor q4_linear_i8(const at::Tensor& x, const at::Tensor& w, const at::Tensor& sm, int64_t N) {
  TORCH_CHECK(w.scalar_type() == at::kByte, "a repacked Q4 weight is uint8");
  return quant_linear<I8Act, Q4I8>(x, w, sm, N);
}

at::Tensor q8_linear_i8(const at::Tensor& x, const at::Tensor& w, const at::Tensor& sm, int64_t N) {
  TORCH_CHECK(w.scalar_type() == at::kChar, "a repacked Q8_0 weight is int8");
  return quant_linear<I8Act, Q8I8>(x, w, sm, N);
}

at::Tensor q4_linear_i16(const at::Tensor& x, const at::Tensor& w, const at::Tensor& sm, int64_t N) {
  TORCH_CHECK(w.scalar_type() == at::kByte, "a repacked Q4 weight is uint8");
  return quant_linear<I16Act, Q4I16>(x, w, sm, N);
}

at::Tensor q8_linear_i16(const at::Tensor& x, const at::Tensor& w, const at::Tensor& sm, int64_t N) {
  TORCH_CHECK(w.scalar_type() == at::kChar, "a repacked Q8_0 weight is int8");
  return quant_linear<I16Act, Q8I16>(x, w, sm, N);
}

}  // namespace
