// The decode step of a float32 model whose products all run oneDNN's bfloat16 linear (the `bf16` arithmetic,
// onednn_bf16: the amx family's pick above its int16 rows). The per-op driver (DecodePlan::run_impl) rounds
// each product's float32 input to bfloat16 and widens its bfloat16 output back, two ATen calls (an allocation
// and a fork-join each) around every product; here the ops that produce a product's input write it in
// bfloat16 and the ops that consume its output read the bfloat16 directly, so a layer is four products and
// five parallel loops:
//   rows:      h += the previous layer's down output; x = bf16(RMSNorm(h))
//   qkv:       oneDNN, bfloat16 out
//   rotary:    each row's q heads into q (float32), K and V to their slots
//   attention: paged_attention, its output rounded to bfloat16 for o
//   o:         oneDNN
//   rows:      h += o; x = bf16(RMSNorm(h))
//   gate_up:   oneDNN
//   silu:      act = bf16(SiLU(gate) * up)
//   down:      oneDNN
// The same roundings as the per-op driver's (a float32 value rounded to bfloat16 once, a bfloat16 one widened
// exactly), but for SiLU, whose exp is silu_mul8's. Included by decode_step.cpp.
#pragma once
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <vector>

#include "decode_attention.h"
#include "plan_layers.h"
#include "team_step.h"

namespace {

// Whether every product of a B-row step is oneDNN's bfloat16 linear, on a float32 model whose only bias is qkv's
inline bool bf16_step_fits(const std::vector<Layer>& layers, int64_t B) {
  for (const Layer& l : layers) {
    if (l.input_norm.scalar_type() != at::kFloat || l.post_norm.scalar_type() != at::kFloat) return false;
    for (const Linear* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      const KernelSpec* k = lin->kernel_for(B);
      if (k == nullptr || k->kind != "onednn_bf16" || (lin != &l.qkv && lin->bias.defined())) return false;
    }
  }
  return !layers.empty();
}

// y[0..n) = x[0..n) rounded to bfloat16 by round_as's rule (to nearest even, as c10::BFloat16's constructor; a NaN
// stays a NaN), 8 lanes at a time (the scalar constructor, lane by lane, took most of the SiLU loop)
inline void to_bf16_row(const float* x, c10::BFloat16* y, int64_t n) {
  typedef uint32_t vu32x8 __attribute__((vector_size(32)));
  typedef uint16_t vu16x8 __attribute__((vector_size(16)));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const vf8 r = round_as_lanes<c10::BFloat16>(load8(x + i));
    vu32x8 u;
    std::memcpy(&u, &r, sizeof(u));
    const vu16x8 h = __builtin_convertvector(u >> 16, vu16x8);
    std::memcpy(y + i, &h, sizeof(h));
  }
  for (; i < n; ++i) y[i] = c10::BFloat16(x[i]);
}

// One step (bf16_step_fits holds for in.B rows): h updated in place
template <typename KV>
void run_bf16_step(std::vector<Layer>& layers, const TeamInputs& in) {
  using bf16 = c10::BFloat16;
  const int64_t B = in.B, hidden = in.hidden, D = in.D, H = in.H, Hkv = in.Hkv;
  const int64_t qs = H * D, kvs = Hkv * D, width = qs + 2 * kvs;
  const auto bopt = at::TensorOptions().dtype(at::kBFloat16);
  at::Tensor x = at::empty({B, hidden}, bopt), attn = at::empty({B, qs}, bopt), act;
  std::vector<float> q(B * qs);
  at::Tensor added;  // the product h takes before the next norm (bfloat16 [B, hidden]); undefined: none
  auto rows = [&](const float* norm) {
    const bf16* a = added.defined() ? added.data_ptr<bf16>() : nullptr;
    bf16* xp = x.data_ptr<bf16>();
    at::parallel_for(0, B, 8, [&](int64_t r0, int64_t r1) {
      std::vector<float> t(hidden);
      for (int64_t r = r0; r < r1; ++r) {
        float* hr = in.h + r * hidden;
        if (a != nullptr) add_into<bf16>(hr, a + r * hidden, hidden);
        rms_norm_row<float>(hr, norm, t.data(), hidden, in.eps);
        to_bf16_row(t.data(), xp + r * hidden, hidden);
      }
    });
  };
  auto product = [&](const Linear& lin, const at::Tensor& input) { return onednn_linear(input, lin.kernel_for(B)->weight, at::Tensor()); };
  for (Layer& l : layers) {
    rows(l.input_norm.data_ptr<float>());
    const at::Tensor qkv = product(l.qkv, x);  // bfloat16 [B, width]
    {
      const bf16* src = qkv.data_ptr<bf16>();
      const float* bias = l.qkv.bias.defined() ? l.qkv.bias.data_ptr<float>() : nullptr;
      KV* kc = l.k_cache.data_ptr<KV>();
      KV* vc = l.v_cache.data_ptr<KV>();
      at::parallel_for(0, B, 8, [&](int64_t b0, int64_t b1) {
        std::vector<float> row(width), tmp(kvs);
        for (int64_t b = b0; b < b1; ++b) {
          for (int64_t i = 0; i < width; ++i) row[i] = load_f(src + b * width, i) + (bias != nullptr ? bias[i] : 0.f);
          rope_store_row<float, KV>(row.data(), in.cos + b * D, in.sin + b * D, q.data() + b * qs, kc + in.loc[b] * kvs,
                                    vc + in.loc[b] * kvs, H, Hkv, D, tmp.data());
        }
      });
    }
    paged_attention<float, KV, bf16>(q.data(), AttnPool<KV>{l.k_cache.data_ptr<KV>(), l.v_cache.data_ptr<KV>(), kvs}, in.idx, in.lens, B,
                                     in.Lmax, H, Hkv, D, attn.data_ptr<bf16>());
    added = product(l.o, attn);
    rows(l.post_norm.data_ptr<float>());
    const at::Tensor gu = product(l.gate_up, x);  // bfloat16 [B, 2 inter]
    const int64_t inter = gu.size(1) / 2;
    if (!act.defined()) act = at::empty({B, inter}, bopt);
    {
      const bf16* g = gu.data_ptr<bf16>();
      bf16* ap = act.data_ptr<bf16>();
      at::parallel_for(0, B, 8, [&](int64_t r0, int64_t r1) {
        std::vector<float> t(inter);
        for (int64_t r = r0; r < r1; ++r) {
          const bf16* gr = g + r * 2 * inter;
          int64_t j = 0;
          for (; j + 8 <= inter; j += 8) {
            const vf8 a8 = silu_mul8(load8(gr + j), load8(gr + inter + j));
            std::memcpy(t.data() + j, &a8, sizeof(a8));
          }
          for (; j < inter; ++j) t[j] = silu_mul(load_f(gr, j), load_f(gr, inter + j));
          to_bf16_row(t.data(), ap + r * inter, inter);
        }
      });
    }
    added = product(l.down, act);
  }
  const bf16* a = added.data_ptr<bf16>();
  at::parallel_for(0, B, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) add_into<bf16>(in.h + r * hidden, a + r * hidden, hidden);
  });
}

}  // namespace
