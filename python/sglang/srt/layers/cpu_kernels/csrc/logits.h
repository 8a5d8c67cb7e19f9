// Greedy sampling's argmax over float32 logits rows: torch.max(-1).indices semantics (the first maximum; a NaN
// counts as the maximum, the first one wins), vectorized. At 49,152 logits a row, torch's reduction ran ~40 us a
// row here (scalar); this reads the row twice from cache. Included by decode_step.cpp.
#pragma once
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace {

inline int64_t argmax_row(const float* x, int64_t n) {
  float top = -std::numeric_limits<float>::infinity();
  int nan = 0;
#pragma omp simd reduction(max : top) reduction(| : nan)
  for (int64_t i = 0; i < n; ++i) {
    top = x[i] > top ? x[i] : top;
    nan |= x[i] != x[i];
  }
  for (int64_t i = 0; i < n; ++i)
    if (nan ? x[i] != x[i] : x[i] == top) return i;
  return 0;  // every entry -inf: torch picks the first
}

// logits [R, V] float32 with unit stride along V -> int64 [R], rows in parallel. With a sparse logit bias (bias_ids,
// bias_values [n], bias_offsets [R + 1]: row r's entries are [offsets[r], offsets[r + 1])), each row's maximum is
// taken over the logits as `logits[r][ids] += values` would leave them (one float32 add per entry, a repeated id's
// last entry wins), without the copy of the row that sampling's penalized path makes: the entries are added in
// place and the row restored before it returns, so the caller sees its logits unchanged. Every index is checked
// before any row is touched.
at::Tensor argmax_rows(const at::Tensor& logits, const c10::optional<at::Tensor>& bias_ids = c10::nullopt,
                       const c10::optional<at::Tensor>& bias_values = c10::nullopt,
                       const c10::optional<at::Tensor>& bias_offsets = c10::nullopt) {
  TORCH_CHECK(logits.device().is_cpu() && logits.dim() == 2 && logits.scalar_type() == at::kFloat && logits.stride(1) == 1 &&
                  logits.size(1) >= 1,
              "argmax_rows: logits must be a CPU float32 [R, V >= 1] tensor with unit stride along V");
  const int64_t R = logits.size(0), V = logits.size(1), ld = logits.stride(0);
  const bool biased = bias_ids.has_value();
  TORCH_CHECK(biased == bias_values.has_value() && biased == bias_offsets.has_value(),
              "argmax_rows: bias_ids, bias_values and bias_offsets come together");
  const int64_t* ids = nullptr;
  const float* vals = nullptr;
  const int64_t* off = nullptr;
  if (biased) {
    const at::Tensor &i = *bias_ids, &v = *bias_values, &o = *bias_offsets;
    TORCH_CHECK(i.scalar_type() == at::kLong && v.scalar_type() == at::kFloat && o.scalar_type() == at::kLong && i.dim() == 1 &&
                    v.dim() == 1 && o.dim() == 1 && i.is_contiguous() && v.is_contiguous() && o.is_contiguous() &&
                    i.numel() == v.numel() && o.numel() == R + 1,
                "argmax_rows: the bias is int64 ids [n], float32 values [n] and int64 offsets [R + 1], contiguous");
    TORCH_CHECK(R == 1 || ld >= V, "argmax_rows: biased rows must not overlap (row stride ", ld, " < ", V, ")");
    ids = i.data_ptr<int64_t>();
    vals = v.data_ptr<float>();
    off = o.data_ptr<int64_t>();
    TORCH_CHECK(off[0] == 0 && off[R] == i.numel(), "argmax_rows: bias_offsets must run from 0 to the number of entries");
    for (int64_t r = 0; r < R; ++r) TORCH_CHECK(off[r] <= off[r + 1], "argmax_rows: bias_offsets must not decrease");
    for (int64_t j = 0; j < i.numel(); ++j) TORCH_CHECK(ids[j] >= 0 && ids[j] < V, "argmax_rows: bias id ", ids[j], " is outside [0, ", V, ")");
  }
  at::Tensor out = at::empty({R}, logits.options().dtype(at::kLong));
  float* x = logits.data_ptr<float>();
  int64_t* o = out.data_ptr<int64_t>();
  at::parallel_for(0, R, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> saved;
    for (int64_t r = begin; r < end; ++r) {
      float* row = x + r * ld;
      const int64_t j0 = biased ? off[r] : 0, j1 = biased ? off[r + 1] : 0;
      saved.resize(j1 - j0);
      for (int64_t j = j0; j < j1; ++j) saved[j - j0] = row[ids[j]];
      for (int64_t j = j0; j < j1; ++j) row[ids[j]] = saved[j - j0] + vals[j];
      o[r] = argmax_row(row, V);
      for (int64_t j = j1 - 1; j >= j0; --j) row[ids[j]] = saved[j - j0];  // backwards: a repeated id ends as it was
    }
  });
  return out;
}

}  // namespace
