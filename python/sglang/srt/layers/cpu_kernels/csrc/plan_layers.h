// The fused decode plan's layer types and row operations (decode_step.cpp, team_step.h): a linear
// layer's kernels per batch size (KernelSpec, Linear), a layer's weights and KV buffers (Layer), and
// the loops both step drivers share (RMSNorm, the residual add, the rotate-half rotary; the per-op
// driver's KV write), so each rounding rule lives once.
#pragma once
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "vec.h"
#include "decode_attention.h"
#include "packed_f32.h"
#include "int8_linear.h"
#include "int16_linear.h"
#include "quant_linear.h"
#include "lora_product.h"

namespace {

// y = dtype(x * rsqrt(mean(x^2) + eps) * w) for one row x of float32
template <typename T>
inline void rms_norm_row(const float* x, const T* w, T* y, int64_t dim, float eps) {
  float ss = 0.f;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < dim; ++i) ss += x[i] * x[i];
  const float inv = 1.f / std::sqrt(ss / static_cast<float>(dim) + eps);
  for (int64_t i = 0; i < dim; ++i) y[i] = round_to<T>(x[i] * inv * load_f(w, i));
}

// out[r] = rms_norm_row(h[r]), h float32 [rows, dim]; rows in parallel
template <typename T>
void rms_norm(const float* h, const T* w, T* out, int64_t rows, int64_t dim, float eps) {
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) rms_norm_row<T>(h + r * dim, w, out + r * dim, dim, eps);
  });
}

// SiLU(g) * u as ATen's float kernels compute it (g / (1 + exp(-g)), then the product), on 8 lanes and on one;
// fast_exp8: an omp simd loop over fast_exp stayed scalar (160 us a row a step)
inline vf8 silu_mul8(vf8 g, vf8 u) { return g / (1.f + fast_exp8(-g)) * u; }
inline float silu_mul(float g, float u) { return g / (1.f + fast_exp(-g)) * u; }

template <typename T>
void add_into(float* __restrict h, const T* __restrict x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) h[i] += load_f(x, i);
}

// rotate-half rotary of one head, each product rounded like the eager bf16 ops
template <typename T>
inline void rope_head(const T* x, const T* cos, const T* sin, T* out, int64_t d) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < d; ++i) {
    const float rot = i < half ? -static_cast<float>(x[i + half]) : static_cast<float>(x[i - half]);
    const T a = round_to<T>(static_cast<float>(x[i]) * static_cast<float>(cos[i]));
    const T b = round_to<T>(static_cast<float>(round_to<T>(rot)) * static_cast<float>(sin[i]));
    out[i] = round_to<T>(static_cast<float>(a) + static_cast<float>(b));
  }
}

// mkldnn::_linear_pointwise(X, W, B?, attr, scalars, algorithm): oneDNN's
// linear over a weight packed by mkldnn::_reorder_linear_weight
at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  c10::List<c10::optional<at::Scalar>> scalars;
  scalars.push_back(c10::nullopt);
  torch::jit::Stack stack{x, w, bias.defined() ? c10::IValue(bias) : c10::IValue(), std::string("none"), scalars, c10::IValue()};
  op.callBoxed(stack);
  return stack[0].toTensor();
}


// One kernel of a linear layer, as sglang.srt.layers.linear_kernels describes
// it (LinearKernel.spec): named fields, the same kernel the eager layer calls.
struct KernelSpec {
  std::string kind;    // "dense", "onednn", "q4_f32", "q4_i8", "q4_i16", "int4_bf16", "q8_f32", "q8_i8", "q8_i16", "int8_rows", "onednn_bf16"
  at::Tensor weight;   // dense [N, K] | oneDNN-packed (onednn_bf16: bfloat16) | Q4 nibbles [N, K/2] | int4-packed | int8 [N, K] | q4/q8_i8 and _i16: 8-row groups
  at::Tensor scales;   // q4_f32: scale/min [N, K/32, 2]; int4_bf16: scales-and-zeros; q8_f32: [N, K/32]; int8_rows: [N];
                       // q4_i8/q4_i16: float16 [N/8, K/32, 2, 8]; q8_i8/q8_i16: float16 [N/8, K/32, 8]
  int64_t max_batch = 0;  // the most rows this kernel takes; 0: any
  int64_t out_features = 0, in_features = 0;

  at::Tensor apply(const at::Tensor& x, const at::Tensor& bias) const {
    at::Tensor y;
    if (kind == "onednn") return onednn_linear(x, weight, bias);
    if (kind == "dense") return at::linear(x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
    if (kind == "onednn_bf16") y = onednn_linear(x.to(at::kBFloat16), weight, at::Tensor()).to(x.scalar_type());
    else if (kind == "q4_f32") y = q4_linear_f32(x, weight, scales);
    else if (kind == "q8_f32") y = q8_linear_f32(x, weight, scales);
    else if (kind == "q4_i8") y = q4_linear_i8(x, weight, scales, out_features);
    else if (kind == "q8_i8") y = q8_linear_i8(x, weight, scales, out_features);
    else if (kind == "q4_i16") y = q4_linear_i16(x, weight, scales, out_features);
    else if (kind == "q8_i16") y = q8_linear_i16(x, weight, scales, out_features);
    else if (kind == "int4_bf16") y = at::_weight_int4pack_mm_for_cpu(x, weight, 32, scales);
    else if (kind == "int8_rows") y = at::_weight_int8pack_mm(x, weight, scales);
    else TORCH_CHECK(false, "unknown linear kernel kind '", kind, "'");
    return bias.defined() ? y.add_(bias) : y;
  }
};

// A linear layer: its kernels in order of max_batch (the last takes any batch) and its bias.
struct Linear {
  std::vector<KernelSpec> kernels;
  at::Tensor bias;  // [N] or undefined
  int64_t out_features = 0, in_features = 0;

  // the kernel that takes `rows` rows (null: none does)
  const KernelSpec* kernel_for(int64_t rows) const {
    for (const auto& k : kernels)
      if (k.max_batch == 0 || rows <= k.max_batch) return &k;
    return nullptr;
  }

  at::Tensor operator()(const at::Tensor& x) const {
    const KernelSpec* k = kernel_for(x.size(0));
    TORCH_CHECK(k != nullptr, "no kernel of this linear layer takes ", x.size(0), " rows");
    return k->apply(x, bias);
  }
};

// the linear layers an adapter may target, in the order of the LoRA mask's columns
enum LoraLinear : int64_t { kQkv = 0, kO = 1, kGateUp = 2, kDown = 3, kLoraLinears = 4 };

struct Layer {
  at::Tensor input_norm, post_norm;  // [hidden]
  Linear qkv, o, gate_up, down;
  LoraWeights lora[kLoraLinears];  // the adapter pool's buffers of each linear (set_lora); undefined: none
  at::Tensor k_cache, v_cache;  // [slots, kv_heads, head_dim]: the model dtype, or bfloat16 under a float32 model
};

// One row's rotary and KV write: q heads rotated into q, k heads into the slot's K (rounded to KV once, after
// the rotary, as the eager pool's k.to(dtype) does), v copied to the slot's V. row [(heads + 2 kv_heads) D];
// tmp: kv_heads D scratch of T (unused where T is KV).
template <typename T, typename KV>
inline void rope_store_row(const T* row, const T* c, const T* s, T* q, KV* kd, KV* vd, int64_t heads, int64_t kv_heads, int64_t D,
                           T* tmp) {
  const int64_t q_size = heads * D, kv_size = kv_heads * D;
  for (int64_t hh = 0; hh < heads; ++hh) rope_head<T>(row + hh * D, c, s, q + hh * D, D);
  const T* v = row + q_size + kv_size;
  if constexpr (std::is_same<T, KV>::value) {
    for (int64_t hh = 0; hh < kv_heads; ++hh) rope_head<T>(row + q_size + hh * D, c, s, kd + hh * D, D);
    std::memcpy(vd, v, kv_size * sizeof(T));
  } else {
    for (int64_t hh = 0; hh < kv_heads; ++hh) rope_head<T>(row + q_size + hh * D, c, s, tmp + hh * D, D);
    for (int64_t i = 0; i < kv_size; ++i) {
      kd[i] = round_to<KV>(static_cast<float>(tmp[i]));
      vd[i] = round_to<KV>(static_cast<float>(v[i]));
    }
  }
}

// rope_store_row for every row of qkv [B, (heads + 2 kv_heads) D] into q [B, heads D] and the slots out_loc
template <typename T, typename KV>
void rope_and_store(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& out_loc, at::Tensor& q,
                    Layer& l, int64_t heads, int64_t kv_heads, int64_t D) {
  const int64_t B = qkv.size(0), q_size = heads * D, kv_size = kv_heads * D;
  const T* src = qkv.data_ptr<T>();
  const T* cp = cos.data_ptr<T>();
  const T* sp = sin.data_ptr<T>();
  const int64_t* loc = out_loc.data_ptr<int64_t>();
  T* qp = q.data_ptr<T>();
  KV* kc = l.k_cache.data_ptr<KV>();
  KV* vc = l.v_cache.data_ptr<KV>();
  at::parallel_for(0, B, 8, [&](int64_t begin, int64_t end) {
    std::vector<T> tmp(std::is_same<T, KV>::value ? 0 : kv_size);
    for (int64_t b = begin; b < end; ++b)
      rope_store_row<T, KV>(src + b * (q_size + 2 * kv_size), cp + b * D, sp + b * D, qp + b * q_size, kc + loc[b] * kv_size,
                            vc + loc[b] * kv_size, heads, kv_heads, D, tmp.data());
  });
}

}  // namespace
