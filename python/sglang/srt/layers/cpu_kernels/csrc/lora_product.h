// The segmented LoRA product of the fused decode plan: y[r] += B[s] (A[s] x[r])
// for every row r whose adapter slot is s, rows grouped by slot so one slot's
// weights are read once per linear layer for all its rows (never a loop over
// requests). Included by decode_step.cpp only (one translation unit per
// kernel family): plain C++ over the 8-float vectors of vec.h, so every family
// builds the same arithmetic with its own flags.
//
// Layout (sglang/srt/lora/mem_pool.py): A [slots, W, in], Bt [slots, W, out]
// (B transposed, so the expand is a contiguous axpy over outputs), W = parts x R.
// Part p of a fused layer (q/k/v, gate/up) owns A rows and Bt rows [p R, p R + R)
// and its block of outputs; the rest of Bt is zero by construction and skipped.
//
// Rounding follows the eager torch backend: A x is rounded to the model dtype,
// the B product is summed in float32 and added to y with one rounding. Each
// row's result depends on that row alone (fixed summation order), so a request
// gets the same bits alone or in any batch.
#pragma once
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "vec.h"

namespace {

// One linear layer's adapter weights in the slot pool (undefined: no adapter targets it).
struct LoraWeights {
  at::Tensor a, bt;                 // [slots, W, in], [slots, W, out], model dtype, contiguous
  std::vector<int64_t> part_sizes;  // outputs of each stacked part, in order
  bool defined() const { return a.defined(); }
};

// A forward's adapter rows grouped by slot: rows[lo, hi) of segment (slot, lo, hi) share slot.
struct LoraRows {
  std::vector<int64_t> rows;
  std::vector<std::array<int64_t, 3>> segments;
  at::Tensor mask;  // [slots, linears] bool: slot s has weights in linear k (undefined: every slot in every linear)
  bool empty() const { return rows.empty(); }
  bool active(int64_t slot, int64_t linear) const {
    return !mask.defined() || mask.data_ptr<bool>()[slot * mask.size(1) + linear];
  }
};

// row_slots [B] int64: each row's pool slot, -1 for the base model; checked against `slots`
inline LoraRows group_lora_rows(const at::Tensor& row_slots, int64_t slots) {
  TORCH_CHECK(row_slots.scalar_type() == at::kLong && row_slots.dim() == 1, "LoRA row slots must be an int64 [rows] tensor");
  const at::Tensor rs = row_slots.contiguous();
  const int64_t* p = rs.data_ptr<int64_t>();
  const int64_t n = rs.numel();
  std::vector<int64_t> count(slots + 1, 0);
  for (int64_t r = 0; r < n; ++r) {
    TORCH_CHECK(p[r] >= -1 && p[r] < slots, "LoRA slot ", p[r], " of row ", r, " is outside the pool of ", slots, " slots");
    if (p[r] >= 0) ++count[p[r] + 1];
  }
  LoraRows out;
  for (int64_t s = 0; s < slots; ++s) {
    if (count[s + 1]) out.segments.push_back({s, count[s], count[s] + count[s + 1]});
    count[s + 1] += count[s];
  }
  out.rows.resize(count[slots]);
  for (int64_t r = 0; r < n; ++r)  // stable: rows keep their order within a slot
    if (p[r] >= 0) out.rows[count[p[r]]++] = r;
  return out;
}

template <typename T>
inline float dot_f(const T* __restrict a, const T* __restrict x, int64_t n) {
  vf8 acc0{}, acc1{};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 += load8(a + i) * load8(x + i);
    acc1 += load8(a + i + 8) * load8(x + i + 8);
  }
  for (; i + 8 <= n; i += 8) acc0 += load8(a + i) * load8(x + i);
  float s = hsum8(acc0 + acc1);
  for (; i < n; ++i) s += load_f(a, i) * load_f(x, i);
  return s;
}

// y [B, out] += B[s] (A[s] x[r]) for the adapter rows; x [B, in]; `linear` indexes the mask's columns.
template <typename T>
void lora_add(const at::Tensor& x, at::Tensor& y, const LoraWeights& w, const LoraRows& g, int64_t linear) {
  if (!w.defined() || g.empty()) return;
  const int64_t in = x.size(1), out = y.size(1), W = w.a.size(1), parts = static_cast<int64_t>(w.part_sizes.size());
  const int64_t R = W / parts;
  TORCH_CHECK(x.is_contiguous() && y.is_contiguous() && x.size(1) == w.a.size(2) && y.size(1) == w.bt.size(2) && x.size(0) == y.size(0),
              "LoRA product: x [B, ", w.a.size(2), "] and y [B, ", w.bt.size(2), "] expected, got ", x.sizes(), " and ", y.sizes());
  std::vector<std::array<int64_t, 3>> segs;  // the segments whose adapter has weights in this linear
  int64_t n = 0;
  for (const auto& s : g.segments)
    if (g.active(s[0], linear)) {
      segs.push_back(s);
      n += s[2] - s[1];
    }
  if (segs.empty()) return;
  const T* xp = x.data_ptr<T>();
  T* yp = y.data_ptr<T>();
  const T* ap = w.a.data_ptr<T>();
  const T* bp = w.bt.data_ptr<T>();
  std::vector<int64_t> row_of(n), slot_of(n);
  int64_t next = 0;
  for (const auto& s : segs)
    for (int64_t i = s[1]; i < s[2]; ++i, ++next) {
      row_of[next] = g.rows[i];
      slot_of[next] = s[0];
    }
  std::vector<int64_t> part_end(parts);  // part p owns outputs [part_end[p - 1], part_end[p])
  for (int64_t p = 0, o = 0; p < parts; ++p) part_end[p] = o += w.part_sizes[p];
  // Rows are independent, so one parallel region per linear splits them (in slot order: a task's rows
  // mostly share weights, which stay in its cache). A task takes about 2^20 multiply-adds (~70 us on one
  // core), so decode steps of up to ~20 rows run serially: measured on the default model at rank 8,
  // 16 rows take ~80 us a layer on one core, less than waking threads 4 times a layer can cost on a
  // busy machine; long prefills split.
  const int64_t per_row = W * in + R * out;
  at::parallel_for(0, n, std::max<int64_t>(1, (1 << 20) / per_row), [&](int64_t begin, int64_t end) {
    std::vector<float> t(W), acc(out);
    for (int64_t k = begin; k < end; ++k) {
      const int64_t s = slot_of[k];
      const T* xr = xp + row_of[k] * in;
      // shrink: t[j] = dtype(A[s, j] . x)
      for (int64_t j = 0; j < W; ++j) t[j] = round_as<T>(dot_f<T>(ap + (s * W + j) * in, xr, in));
      // expand: acc[o] = sum over part p's rank rows j of t[j] Bt[s, j, o], for o in part p's outputs
      for (int64_t p = 0; p < parts; ++p) {
        const int64_t o0 = p ? part_end[p - 1] : 0, o1 = part_end[p];
        float* a = acc.data();
        std::fill(a + o0, a + o1, 0.f);
        for (int64_t j = p * R; j < (p + 1) * R; ++j) {
          const float c = t[j];
          if (c == 0.f) continue;  // a rank below R, or a part the adapter does not target: zero rows of A
          const T* b = bp + (s * W + j) * out;
#pragma omp simd
          for (int64_t o = o0; o < o1; ++o) a[o] += c * load_f(b, o);
        }
      }
      T* yr = yp + row_of[k] * out;
#pragma omp simd
      for (int64_t o = 0; o < out; ++o) yr[o] = round_to<T>(load_f(yr, o) + acc[o]);
    }
  });
}

// Check one linear layer's pool buffers against the plan's shapes.
inline LoraWeights make_lora_weights(const char* name, at::Tensor a, at::Tensor bt, std::vector<int64_t> part_sizes, int64_t in,
                                     int64_t out, at::ScalarType dtype) {
  int64_t total = 0;
  for (int64_t s : part_sizes) total += s;
  TORCH_CHECK(!part_sizes.empty() && total == out, "LoRA ", name, ": part sizes must sum to the layer's ", out, " outputs");
  TORCH_CHECK(a.dim() == 3 && bt.dim() == 3 && a.size(0) == bt.size(0) && a.size(1) == bt.size(1) && a.size(2) == in && bt.size(2) == out,
              "LoRA ", name, ": A must be [slots, W, ", in, "] and Bt [slots, W, ", out, "], got ", a.sizes(), " and ", bt.sizes());
  TORCH_CHECK(a.size(1) % static_cast<int64_t>(part_sizes.size()) == 0, "LoRA ", name, ": W = ", a.size(1), " is not parts x rank");
  TORCH_CHECK(a.is_contiguous() && bt.is_contiguous() && a.scalar_type() == dtype && bt.scalar_type() == dtype,
              "LoRA ", name, ": A and Bt must be contiguous in the model dtype ", dtype);
  return LoraWeights{std::move(a), std::move(bt), std::move(part_sizes)};
}

// The plan's segmented LoRA product on its own (tests): y += B[s] (A[s] x) per row, in place.
at::Tensor lora_product(const at::Tensor& x, at::Tensor y, const at::Tensor& a, const at::Tensor& bt, std::vector<int64_t> part_sizes,
                        const at::Tensor& row_slots, c10::optional<at::Tensor> mask) {
  TORCH_CHECK(x.dim() == 2 && y.dim() == 2 && x.scalar_type() == y.scalar_type(), "x [B, in] and y [B, out] of one dtype expected");
  const LoraWeights w = make_lora_weights("lora_product", a, bt, std::move(part_sizes), x.size(1), y.size(1), x.scalar_type());
  TORCH_CHECK(row_slots.numel() == x.size(0), "row_slots must have one entry per row");
  LoraRows g = group_lora_rows(row_slots, a.size(0));
  if (mask.has_value()) {
    TORCH_CHECK(mask->scalar_type() == at::kBool && mask->dim() == 2 && mask->size(0) == a.size(0), "mask must be a bool [slots, linears] tensor");
    g.mask = mask->contiguous();
  }
  const at::Tensor xc = x.contiguous();
  TORCH_CHECK(y.is_contiguous(), "y must be contiguous (it is updated in place)");
  if (x.scalar_type() == at::kBFloat16) lora_add<c10::BFloat16>(xc, y, w, g, 0);
  else {
    TORCH_CHECK(x.scalar_type() == at::kFloat, "the LoRA product runs float32 and bfloat16, not ", x.scalar_type());
    lora_add<float>(xc, y, w, g, 0);
  }
  return y;
}

}  // namespace
