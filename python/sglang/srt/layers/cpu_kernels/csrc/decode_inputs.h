// The inputs of a forward through the decode plan in one call (decode_inputs): the rows' embeddings and their
// rotary cos/sin (decode steps, and the short prefills and verifies the plan runs too). In Python
// these are about ten small torch ops (indexes, a cast, views, a broadcast multiply, two gathers), and right
// after a step has streamed the weights each runs from cold caches: 0.25 ms of a 7-9 ms step at one row on
// the Zen 1 EPYC, more of the 3-4 ms ones on faster CPUs. Included by decode_step.cpp.
#pragma once
#include <torch/extension.h>

#include <vector>

namespace {

// (h [B, K] float32, cos [B, D], sin [B, D]): h row b is row ids[b] of a GGUF Q8_0 embedding (q int8 [V, K],
// scale float32 [V, K / 32]), each value float(q) * scale: one float32 product, exact, so the bits of
// q4_packed.q8_rows at float32; cos/sin rows positions[b] of the rotary tables [P, D] (any dtype, as they are).
// An id outside [0, V) or a position outside [0, P) is refused naming it.
std::vector<at::Tensor> decode_inputs(const at::Tensor& q, const at::Tensor& scale, const at::Tensor& ids, const at::Tensor& cos,
                                      const at::Tensor& sin, const at::Tensor& positions) {
  TORCH_CHECK(q.device().is_cpu() && scale.device().is_cpu() && ids.device().is_cpu() && positions.device().is_cpu() &&
                  cos.device().is_cpu() && sin.device().is_cpu(),
              "decode_inputs: every tensor must be on the CPU");
  TORCH_CHECK(q.scalar_type() == at::kChar && q.dim() == 2 && q.is_contiguous() && q.size(1) % 32 == 0,
              "decode_inputs: the embedding must be contiguous int8 [V, K] with K a multiple of 32, got ", q.scalar_type(), " ",
              q.sizes(), q.is_contiguous() ? "" : " (not contiguous)");
  const int64_t V = q.size(0), K = q.size(1), nb = K / 32;
  TORCH_CHECK(scale.scalar_type() == at::kFloat && scale.is_contiguous() && scale.dim() == 2 && scale.size(0) == V && scale.size(1) == nb,
              "decode_inputs: the embedding's scales must be contiguous float32 [", V, ", ", nb, "], got ", scale.scalar_type(), " ",
              scale.sizes());
  TORCH_CHECK(ids.scalar_type() == at::kLong && ids.dim() == 1 && positions.scalar_type() == at::kLong && positions.dim() == 1 &&
                  positions.size(0) == ids.size(0),
              "decode_inputs: ids and positions must be int64 [B] of the same length, got ", ids.scalar_type(), " ", ids.sizes(),
              " and ", positions.scalar_type(), " ", positions.sizes());
  TORCH_CHECK(cos.dim() == 2 && sin.sizes() == cos.sizes() && sin.scalar_type() == cos.scalar_type(),
              "decode_inputs: the rotary tables must be [P, D] alike, got ", cos.scalar_type(), " ", cos.sizes(), " and ",
              sin.scalar_type(), " ", sin.sizes());
  const int64_t B = ids.size(0), P = cos.size(0);
  const at::Tensor idc = ids.contiguous(), pc = positions.contiguous();
  const int64_t* id = idc.data_ptr<int64_t>();
  const int64_t* pos = pc.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(id[b] >= 0 && id[b] < V, "decode_inputs: token id ", id[b], " of row ", b, " is outside the vocabulary [0, ", V, ")");
    TORCH_CHECK(pos[b] >= 0 && pos[b] < P, "decode_inputs: position ", pos[b], " of row ", b, " is outside the rotary table [0, ", P, ")");
  }
  at::Tensor h = at::empty({B, K}, scale.options());
  const int8_t* qp = q.data_ptr<int8_t>();
  const float* sp = scale.data_ptr<float>();
  float* hp = h.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    const int8_t* row = qp + id[b] * K;
    const float* s = sp + id[b] * nb;
    float* o = hp + b * K;
    for (int64_t j = 0; j < K; ++j) o[j] = static_cast<float>(row[j]) * s[j / 32];
  }
  return {h, at::index_select(cos, 0, pc), at::index_select(sin, 0, pc)};
}

}  // namespace
