// Fused CPU decode step for Llama-family decoders: every layer of one decode
// forward in a single call, so the per-op Python dispatch of the eager loop
// (about 50 ops a layer) disappears. Matrix products and SiLU-and-mul stay
// library calls (oneDNN's packed linear, dense GEMM, torch's int4 kernel) but
// for Q4/Q8_0 weights (packed_f32.h: float32 math; int8_linear.h: int8 dot
// products); norms, rotary, the KV write and paged attention (decode_attention.h:
// K/V read in place from the pool) are loops here. Built once per kernel family (isa_family.h)
// and loaded by sglang/srt/layers/cpu_kernels/build.py. LoRA adapter products
// (lora_product.h) are added after each linear layer an adapter targets, for
// the rows of a forward that name an adapter slot. A step whose products are all
// integer kernels runs in one parallel region (team_step.h); the others run op by
// op (run_impl). The layer types and row loops both share are in plan_layers.h.
//
// Rounding follows the eager torch code op by op (each bfloat16 op rounds its
// float result once), so bfloat16 output matches the eager path up to the
// summation order of the attention dot products.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "isa_family.h"
#include "vec.h"
#include "decode_attention.h"
#include "plan_layers.h"
#include "team_step.h"
#include "bf16_step.h"
#include "logits.h"
#include "decode_inputs.h"
#include "thread_binding.h"

namespace {

class DecodePlan {
 public:
  DecodePlan(int64_t heads, int64_t kv_heads, int64_t head_dim, double eps)
      : heads_(heads), kv_heads_(kv_heads), head_dim_(head_dim), eps_(static_cast<float>(eps)) {
    TORCH_CHECK(head_dim % 16 == 0, "the decode plan needs a head size that is a multiple of 16, got ", head_dim);
    TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0, "attention heads (", heads, ") must be a multiple of KV heads (", kv_heads, ")");
  }

  void add_layer(at::Tensor input_norm, at::Tensor post_norm, std::vector<KernelSpec> qkv, c10::optional<at::Tensor> qkv_bias,
                 std::vector<KernelSpec> o, std::vector<KernelSpec> gate_up, std::vector<KernelSpec> down, at::Tensor k_cache,
                 at::Tensor v_cache) {
    Layer l;
    l.input_norm = input_norm;
    l.post_norm = post_norm;
    const int64_t hidden = input_norm.numel();
    l.qkv = make_linear("qkv", std::move(qkv), qkv_bias, (heads_ + 2 * kv_heads_) * head_dim_, hidden);
    l.o = make_linear("o", std::move(o), c10::nullopt, hidden, heads_ * head_dim_);
    l.gate_up = make_linear("gate_up", std::move(gate_up), c10::nullopt, -1, hidden);
    TORCH_CHECK(l.gate_up.out_features % 2 == 0, "gate_up must have an even number of outputs");
    l.down = make_linear("down", std::move(down), c10::nullopt, hidden, l.gate_up.out_features / 2);
    TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "KV buffers must be contiguous");
    TORCH_CHECK(k_cache.dim() == 3 && k_cache.size(1) == kv_heads_ && k_cache.size(2) == head_dim_ && v_cache.sizes() == k_cache.sizes(),
                "KV buffers must be [slots, ", kv_heads_, ", ", head_dim_, "], got ", k_cache.sizes());
    const auto model_t = input_norm.scalar_type(), kv_t = k_cache.scalar_type();
    TORCH_CHECK(v_cache.scalar_type() == kv_t && (kv_t == model_t || (model_t == at::kFloat && kv_t == at::kBFloat16)),
                "KV buffers must have the model dtype ", model_t, " (or bfloat16 under a float32 model), got ", kv_t);
    TORCH_CHECK(layers_.empty() || layers_.front().k_cache.scalar_type() == kv_t, "every layer's KV buffer must have one dtype");
    TORCH_CHECK(layers_.empty() || layers_.front().k_cache.size(0) == k_cache.size(0), "every layer's KV buffer must have the same slots");
    l.k_cache = k_cache;
    l.v_cache = v_cache;
    layers_.push_back(std::move(l));
    std::lock_guard<std::mutex> lock(team_mutex_);
    team_.clear();
  }

  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }

  // The LoRA slot pool's buffers of one linear layer ("qkv", "o", "gate_up", "down") of layer `layer`:
  // held, not copied, so adapters loaded into slots later are seen by the next step.
  void set_lora(int64_t layer, const std::string& linear, at::Tensor a, at::Tensor bt) {
    TORCH_CHECK(layer >= 0 && layer < num_layers(), "set_lora: layer ", layer, " is outside the plan's ", num_layers(), " layers");
    Layer& l = layers_[layer];
    const int64_t hidden = l.input_norm.numel(), inter = l.gate_up.out_features / 2, q = heads_ * head_dim_, kv = kv_heads_ * head_dim_;
    const auto dtype = l.input_norm.scalar_type();
    int64_t k = kQkv, in = hidden;
    std::vector<int64_t> parts{q, kv, kv};
    if (linear == "o") {
      k = kO;
      parts = {hidden};
      in = q;
    } else if (linear == "gate_up") {
      k = kGateUp;
      parts = {inter, inter};
    } else if (linear == "down") {
      k = kDown;
      parts = {hidden};
      in = inter;
    } else {
      TORCH_CHECK(linear == "qkv", "set_lora: unknown linear '", linear, "' (qkv, o, gate_up or down)");
    }
    int64_t out = 0;
    for (int64_t p : parts) out += p;
    TORCH_CHECK(lora_slots_ < 0 || a.size(0) == lora_slots_, "set_lora: every linear's pool must have ", lora_slots_, " slots");
    l.lora[k] = make_lora_weights(linear.c_str(), a, bt, parts, in, out, dtype);
    lora_slots_ = a.size(0);
  }

  int64_t lora_slots() const { return lora_slots_; }

  // Whether a step of `batch` rows with no adapter rows runs in one parallel region (team_step.h)
  bool runs_in_one_region(int64_t batch) {
    TORCH_CHECK(batch >= 1, "runs_in_one_region: batch must be at least 1, got ", batch);
    return !layers_.empty() && layers_.front().input_norm.scalar_type() == at::kFloat && !team_layers(batch).empty();
  }

  // Which driver runs a step of `batch` rows with no adapter rows: "one_region" (team_step.h), "bf16" (bf16_step.h:
  // every product oneDNN's bfloat16 linear) or "per_op" (run_impl)
  std::string driver(int64_t batch) {
    if (runs_in_one_region(batch)) return "one_region";
    return bf16_step_fits(layers_, batch) ? "bf16" : "per_op";
  }

  // The final RMSNorm (float32 [hidden]) and LM head kernels (vocab of their outputs are logits; the rest
  // padding) that run_logits applies after the last layer. Called while building the plan, as add_layer is;
  // a call that fails leaves the head as it was.
  void set_head(at::Tensor norm, std::vector<KernelSpec> head, int64_t vocab) {
    TORCH_CHECK(!layers_.empty(), "set_head: add the layers first");
    const int64_t hidden = layers_.front().input_norm.numel();
    TORCH_CHECK(norm.scalar_type() == at::kFloat && norm.is_contiguous() && norm.numel() == hidden,
                "set_head: the final norm must be a contiguous float32 [", hidden, "]");
    Linear linear = make_linear("lm_head", std::move(head), c10::nullopt, -1, hidden);
    TORCH_CHECK(vocab >= 1 && vocab <= linear.out_features, "set_head: vocab ", vocab, " is outside [1, ", linear.out_features, "]");
    std::lock_guard<std::mutex> lock(team_mutex_);
    head_ = std::move(linear);
    head_norm_ = norm;
    vocab_ = vocab;
    heads_for_.clear();
  }

  // Whether run_logits takes a step of `batch` rows asking for the logits of `rows` of them: a head is set, the
  // step runs in one region and the head's kernel for that many rows is an integer one. More rows than the
  // batch (an extend chunk's prompt logprobs beside its sampling row) is false: those keep the separate head.
  bool fuses_head(int64_t batch, int64_t rows) {
    if (batch < 1 || rows < 1 || rows > batch) return false;
    return runs_in_one_region(batch) && head_for(rows).w != nullptr;
  }

  // h: [B, hidden] float32 residual stream, updated in place and returned.
  // cos, sin: [B, head_dim] model dtype; kv_index: [B, Lmax] int64 slots;
  // kv_lens: [B] int64 (this token included); out_loc: [B] int64 slot of the new token.
  // lora_slots: [B] int64 LoRA pool slot of each row (-1: the base model; none: no adapter row);
  // lora_mask: [pool slots, 4] bool, slot s has weights in linear k (qkv, o, gate_up, down).
  at::Tensor run(at::Tensor h, at::Tensor cos, at::Tensor sin, at::Tensor kv_index, at::Tensor kv_lens, at::Tensor out_loc,
                 c10::optional<at::Tensor> lora_slots, c10::optional<at::Tensor> lora_mask) {
    const Inputs in = checked(h, cos, sin, kv_index, kv_lens, out_loc);
    const auto dtype = layers_.front().input_norm.scalar_type();
    const int64_t B = h.size(0);
    LoraRows lora;
    if (lora_slots.has_value()) {
      TORCH_CHECK(lora_slots_ > 0, "LoRA rows were given, but no adapter pool is attached to the plan (set_lora)");
      TORCH_CHECK(lora_slots->numel() == B, "lora_slots must have one entry per row (", B, "), got ", lora_slots->numel());
      lora = group_lora_rows(*lora_slots, lora_slots_);
      if (lora_mask.has_value()) {
        TORCH_CHECK(lora_mask->scalar_type() == at::kBool && lora_mask->dim() == 2 && lora_mask->size(0) == lora_slots_ &&
                        lora_mask->size(1) == kLoraLinears,
                    "lora_mask must be a bool [", lora_slots_, ", ", int64_t(kLoraLinears), "] tensor");
        lora.mask = lora_mask->contiguous();
      }
    }
    if (dtype == at::kBFloat16) {
      run_impl<c10::BFloat16, c10::BFloat16>(h, in, lora);
    } else {
      TORCH_CHECK(dtype == at::kFloat, "the decode plan runs float32 and bfloat16 models, not ", dtype);
      if (layers_.front().k_cache.scalar_type() == at::kBFloat16) run_impl<float, c10::BFloat16>(h, in, lora);
      else run_impl<float, float>(h, in, lora);
    }
    return h;
  }

  // run's step (no adapter rows), then the final norm and the LM head of rows `rows` ([R] int64 rows of h) in the
  // same parallel region: logits [R, vocab] float32, what lm_head(norm(h[rows])) computes. Only where fuses_head.
  at::Tensor run_logits(at::Tensor h, at::Tensor cos, at::Tensor sin, at::Tensor kv_index, at::Tensor kv_lens, at::Tensor out_loc,
                        at::Tensor rows) {
    const Inputs in = checked(h, cos, sin, kv_index, kv_lens, out_loc);
    const int64_t B = h.size(0);
    TORCH_CHECK(rows.scalar_type() == at::kLong && rows.dim() == 1, "rows must be a 1-d int64 tensor");
    const at::Tensor r = rows.contiguous();
    const int64_t R = r.numel();
    TORCH_CHECK(R >= 1 && R <= B, "run_logits: need 1 <= rows (", R, ") <= batch (", B, ")");
    TORCH_CHECK(fuses_head(B, R), "run_logits: this plan does not fuse the LM head for ", R, " of ", B, " rows (fuses_head)");
    for (int64_t i = 0; i < R; ++i)
      TORCH_CHECK(r.data_ptr<int64_t>()[i] >= 0 && r.data_ptr<int64_t>()[i] < B, "rows[", i, "] is outside the batch of ", B);
    const IntProduct p = head_for(R);
    at::Tensor logits = at::empty({R, p.N}, h.options());
    const TeamHead head{p, head_norm_.data_ptr<float>(), r.data_ptr<int64_t>(), R, logits.data_ptr<float>()};
    const TeamInputs ti = team_inputs(h, in);
    if (layers_.front().k_cache.scalar_type() == at::kBFloat16) run_team<c10::BFloat16>(layers_, team_layers(B), ti, &head);
    else run_team<float>(layers_, team_layers(B), ti, &head);
    return logits.narrow(1, 0, vocab_);
  }

 private:
  // A step's index inputs, contiguous and checked against the pool (the loops index it with them: out of range
  // would be memory corruption, not an error)
  struct Inputs {
    at::Tensor cos, sin, idx, lens, loc;
  };

  Inputs checked(const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& kv_index,
                 const at::Tensor& kv_lens, const at::Tensor& out_loc) const {
    TORCH_CHECK(!layers_.empty(), "the decode plan has no layers");
    TORCH_CHECK(h.scalar_type() == at::kFloat && h.is_contiguous() && h.dim() == 2, "h must be a contiguous float32 [B, hidden]");
    const auto dtype = layers_.front().input_norm.scalar_type();
    const int64_t B = h.size(0);
    TORCH_CHECK(h.size(1) == layers_.front().input_norm.numel(), "h has ", h.size(1), " features, the model ", layers_.front().input_norm.numel());
    TORCH_CHECK(cos.scalar_type() == dtype && sin.scalar_type() == dtype && cos.size(0) == B && cos.size(-1) == head_dim_,
                "cos/sin must be [B, head_dim] in the model dtype");
    TORCH_CHECK(kv_index.scalar_type() == at::kLong && kv_lens.scalar_type() == at::kLong && out_loc.scalar_type() == at::kLong,
                "slot indices must be int64");
    TORCH_CHECK(kv_index.dim() == 2 && kv_index.size(0) == B && kv_lens.numel() == B && out_loc.numel() == B,
                "kv_index [B, Lmax], kv_lens [B] and out_loc [B] must match h's batch");
    Inputs in{cos.contiguous(), sin.contiguous(), kv_index.contiguous(), kv_lens.contiguous(), out_loc.contiguous()};
    const int64_t slots = layers_.front().k_cache.size(0);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = in.lens.data_ptr<int64_t>()[b], at_slot = in.loc.data_ptr<int64_t>()[b];
      TORCH_CHECK(n >= 1 && n <= in.idx.size(1), "kv_lens[", b, "] = ", n, " is outside [1, ", in.idx.size(1), "]");
      TORCH_CHECK(at_slot >= 0 && at_slot < slots, "out_loc[", b, "] = ", at_slot, " is outside the pool of ", slots, " slots");
      const int64_t* row = in.idx.data_ptr<int64_t>() + b * in.idx.size(1);
      for (int64_t t = 0; t < n; ++t) TORCH_CHECK(row[t] >= 0 && row[t] < slots, "kv_index[", b, ", ", t, "] is outside the pool");
    }
    return in;
  }

  TeamInputs team_inputs(at::Tensor& h, const Inputs& in) const {
    return TeamInputs{h.data_ptr<float>(), in.cos.data_ptr<float>(), in.sin.data_ptr<float>(), in.idx.data_ptr<int64_t>(),
                      in.lens.data_ptr<int64_t>(), in.loc.data_ptr<int64_t>(), h.size(0), h.size(1), in.idx.size(1), heads_, kv_heads_,
                      head_dim_, eps_};
  }

  // out < 0: any number of outputs (checked by the caller)
  static Linear make_linear(const char* name, std::vector<KernelSpec> kernels, const c10::optional<at::Tensor>& bias, int64_t out,
                            int64_t in) {
    TORCH_CHECK(!kernels.empty(), "linear ", name, ": no kernel given");
    Linear l;
    l.out_features = kernels.front().out_features;
    l.in_features = kernels.front().in_features;
    for (size_t i = 0; i < kernels.size(); ++i) {
      const KernelSpec& k = kernels[i];
      TORCH_CHECK(k.weight.defined(), "linear ", name, ": kernel '", k.kind, "' has no weight");
      TORCH_CHECK(k.out_features == l.out_features && k.in_features == l.in_features, "linear ", name, ": its kernels disagree on the shape");
      TORCH_CHECK((k.max_batch == 0) == (i + 1 == kernels.size()), "linear ", name,
                  ": every kernel but the last takes a bounded batch, the last any batch");
    }
    TORCH_CHECK(out < 0 || l.out_features == out, "linear ", name, " must have ", out, " outputs, got ", l.out_features);
    TORCH_CHECK(l.in_features == in, "linear ", name, " must take ", in, " features, got ", l.in_features);
    if (bias.has_value()) l.bias = *bias;
    l.kernels = std::move(kernels);
    return l;
  }

  // T: the model dtype (activations, weights' outputs); KV: the cache's (T, or bfloat16 under float32)
  template <typename T, typename KV>
  void run_impl(at::Tensor& h, const Inputs& in, const LoraRows& lora) {
    const int64_t B = h.size(0), hidden = h.size(1);
    const at::Tensor &cos = in.cos, &sin = in.sin, &kv_index = in.idx, &kv_lens = in.lens, &out_loc = in.loc;
    if constexpr (std::is_same<T, float>::value) {
      const std::vector<TeamLayer>& team = team_layers(B);
      if (lora.empty() && !team.empty()) {
        run_team<KV>(layers_, team, team_inputs(h, in));
        return;
      }
      if (lora.empty() && bf16_step_fits(layers_, B)) {
        run_bf16_step<KV>(layers_, team_inputs(h, in));
        return;
      }
    }
    const auto opts = h.options().dtype(c10::CppTypeToScalarType<T>::value);
    at::Tensor x = at::empty({B, hidden}, opts);
    at::Tensor q = at::empty({B, heads_ * head_dim_}, opts);
    at::Tensor attn = at::empty({B, heads_ * head_dim_}, opts);
    float* hp = h.data_ptr<float>();
    for (auto& l : layers_) {
      rms_norm<T>(hp, l.input_norm.data_ptr<T>(), x.data_ptr<T>(), B, hidden, eps_);
      at::Tensor qkv = l.qkv(x);  // [B, q + 2 kv]
      lora_add<T>(x, qkv, l.lora[kQkv], lora, kQkv);
      rope_and_store<T, KV>(qkv, cos, sin, out_loc, q, l, heads_, kv_heads_, head_dim_);
      paged_attention<T, KV>(q.data_ptr<T>(), AttnPool<KV>{l.k_cache.data_ptr<KV>(), l.v_cache.data_ptr<KV>(), kv_heads_ * head_dim_},
                             kv_index.data_ptr<int64_t>(), kv_lens.data_ptr<int64_t>(), B, kv_index.size(1), heads_, kv_heads_,
                             head_dim_, attn.data_ptr<T>());
      at::Tensor o = l.o(attn);
      lora_add<T>(attn, o, l.lora[kO], lora, kO);
      add_into<T>(hp, o.data_ptr<T>(), B * hidden);
      rms_norm<T>(hp, l.post_norm.data_ptr<T>(), x.data_ptr<T>(), B, hidden, eps_);
      at::Tensor gu = l.gate_up(x);  // [B, 2 * inter]
      lora_add<T>(x, gu, l.lora[kGateUp], lora, kGateUp);
      const int64_t inter = gu.size(1) / 2;
      // ATen's SiLU and product: the eager kernels, so rounding is identical
      at::Tensor act = at::silu(gu.narrow(1, 0, inter)).mul_(gu.narrow(1, inter, inter));
      at::Tensor dn = l.down(act);
      lora_add<T>(act, dn, l.lora[kDown], lora, kDown);
      add_into<T>(hp, dn.data_ptr<T>(), B * hidden);
    }
  }

  // The integer products of every layer for B rows (team_step.h), resolved once per batch size; empty: the
  // per-op driver runs this batch size (a kernel that is not an integer one, or heads the team cannot split)
  // (a map's entries stay where they are, so a step running on another thread keeps its reference)
  const std::vector<TeamLayer>& team_layers(int64_t B) {
    std::lock_guard<std::mutex> lock(team_mutex_);
    auto it = team_.find(B);
    if (it == team_.end())
      it = team_.emplace(B, team_fits(layers_, heads_, kv_heads_, head_dim_) ? resolve_team(layers_, B) : std::vector<TeamLayer>{}).first;
    return it->second;
  }

  // The LM head's integer kernel for R rows (its weight null where no head is set or that kernel is not an
  // integer one), resolved once per R; a copy, so a later set_head cannot move it under the caller
  IntProduct head_for(int64_t R) {
    std::lock_guard<std::mutex> lock(team_mutex_);
    auto it = heads_for_.find(R);
    if (it == heads_for_.end()) {
      IntProduct p;
      if (!head_norm_.defined() || !resolve_product(head_, R, &p)) p = IntProduct{};
      it = heads_for_.emplace(R, p).first;
    }
    return it->second;
  }

  int64_t heads_, kv_heads_, head_dim_;
  float eps_;
  Linear head_;  // set_head's: the LM head's kernels; head_norm_ undefined until then
  at::Tensor head_norm_;
  int64_t vocab_ = 0;
  std::map<int64_t, IntProduct> heads_for_;  // by rows; cleared by set_head
  std::vector<Layer> layers_;
  std::map<int64_t, std::vector<TeamLayer>> team_;  // by batch size; cleared when a layer is added
  std::mutex team_mutex_;
  int64_t lora_slots_ = -1;  // slots of the attached LoRA pool (-1: none)
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  py::class_<KernelSpec>(m, "KernelSpec")
      .def(py::init([](std::string kind, at::Tensor weight, c10::optional<at::Tensor> scales, int64_t max_batch, int64_t out_features,
                       int64_t in_features) {
             KernelSpec k;
             k.kind = std::move(kind);
             k.weight = std::move(weight);
             if (scales.has_value()) k.scales = *scales;
             k.max_batch = max_batch;
             k.out_features = out_features;
             k.in_features = in_features;
             return k;
           }),
           py::arg("kind"), py::arg("weight"), py::arg("scales") = py::none(), py::arg("max_batch") = 0, py::arg("out_features"),
           py::arg("in_features"))
      .def_readonly("kind", &KernelSpec::kind)
      .def_readonly("max_batch", &KernelSpec::max_batch)
      .def_readonly("out_features", &KernelSpec::out_features)
      .def_readonly("in_features", &KernelSpec::in_features);
  py::class_<DecodePlan>(m, "DecodePlan")
      .def(py::init<int64_t, int64_t, int64_t, double>())
      .def("add_layer", &DecodePlan::add_layer, py::arg("input_norm"), py::arg("post_norm"), py::arg("qkv"), py::arg("qkv_bias"), py::arg("o"),
           py::arg("gate_up"), py::arg("down"), py::arg("k_cache"), py::arg("v_cache"))
      .def("num_layers", &DecodePlan::num_layers)
      .def("set_lora", &DecodePlan::set_lora, py::arg("layer"), py::arg("linear"), py::arg("a"), py::arg("bt"))
      .def("lora_slots", &DecodePlan::lora_slots)
      .def("runs_in_one_region", &DecodePlan::runs_in_one_region, py::arg("batch"))
      .def("driver", &DecodePlan::driver, py::arg("batch"))
      .def("set_head", &DecodePlan::set_head, py::arg("norm"), py::arg("head"), py::arg("vocab"))
      .def("fuses_head", &DecodePlan::fuses_head, py::arg("batch"), py::arg("rows"))
      .def("run_logits", &DecodePlan::run_logits, py::arg("h"), py::arg("cos"), py::arg("sin"), py::arg("kv_index"), py::arg("kv_lens"),
           py::arg("out_loc"), py::arg("rows"), py::call_guard<py::gil_scoped_release>())
      // the step touches no Python object: other threads of the process run meanwhile
      .def("run", &DecodePlan::run, py::arg("h"), py::arg("cos"), py::arg("sin"), py::arg("kv_index"), py::arg("kv_lens"), py::arg("out_loc"),
           py::arg("lora_slots") = py::none(), py::arg("lora_mask") = py::none(), py::call_guard<py::gil_scoped_release>());
  m.def("decode_inputs", &decode_inputs, "(h, cos, sin) of a decode step: Q8_0 embedding rows ids dequantized to float32 "
        "(q int8 [V, K], scale float32 [V, K/32]), rotary table rows positions", py::arg("q"), py::arg("scale"), py::arg("ids"),
        py::arg("cos"), py::arg("sin"), py::arg("positions"));
  m.def("argmax_rows", &argmax_rows, "the index of each row's first maximum (torch.max(-1).indices), logits [R, V] float32; with "
        "a sparse logit bias (ids, values, offsets [R + 1]) the maxima of the biased rows, the logits left unchanged",
        py::arg("logits"), py::arg("bias_ids") = py::none(), py::arg("bias_values") = py::none(), py::arg("bias_offsets") = py::none());
  m.def("lora_product", &lora_product, "y [B, out] += B[s] (A[s] x[r]) for each row r of LoRA slot s = row_slots[r] >= 0 (in place)",
        py::arg("x"), py::arg("y"), py::arg("a"), py::arg("bt"), py::arg("part_sizes"), py::arg("row_slots"), py::arg("mask") = py::none(),
        py::call_guard<py::gil_scoped_release>());
  m.def("q8_linear_f32", &q8_linear_f32, "x [M, K] float32 @ packed GGUF Q8_0 weight (int8 [N, K], scale [N, K/32]).T",
        py::call_guard<py::gil_scoped_release>());
  m.def("set_weight_prefetch", [](int64_t bytes, int64_t rows) {
        TORCH_CHECK(bytes >= 0 && bytes <= 65536 && bytes % 64 == 0, "the weight prefetch distance is 0..65536 bytes, a multiple of 64, got ", bytes);
        TORCH_CHECK(rows >= 1 && rows <= 64, "the weight prefetch's rows are 1..64, got ", rows);
        g_weight_prefetch = bytes;
        g_weight_prefetch_rows = static_cast<int>(rows);
      }, "how far ahead (bytes, 0: off) this library's integer products prefetch their weights in passes of at most `rows` rows; "
         "call between kernel calls", py::arg("bytes"), py::arg("rows") = 1);
  m.def("bind_team", &bind_team, "binds member t of the decode step's team of len(cpus) threads (the caller is member 0) to core "
        "cpus[t]; returns how many were bound", py::arg("cpus"));
  m.def("set_step_redo", [](bool on) { g_step_redo = on; },
        "whether a one-region step of at most step_redo_rows() rows lets a thread compute a share of a phase that another "
        "thread has left overdue (team_redo.h; the same bits either way); call between steps", py::arg("on"));
  m.def("step_redo", []() { return g_step_redo; }, "what set_step_redo set (on by default)");
  m.def("step_redo_taken", []() { return g_redo_taken.load(); }, "how many phase shares a thread has computed for another, ever");
  m.def("stall_step_thread", [](int64_t thread, int64_t phase, int64_t us, bool replay) {
        TORCH_CHECK(us >= 0 && us <= 1000000, "a stall is 0..1000000 us, got ", us);
        g_stall_thread = static_cast<int>(thread);
        g_stall_phase = phase;
        g_stall_us = us;
        g_stall_replay = replay;
      }, "for tests: member `thread` of the step's team sleeps `us` before its share of phase `phase` of every one-region "
         "step (-1: none), or with `replay` computes the share, sleeps, and computes it again; call between steps",
        py::arg("thread"), py::arg("phase"), py::arg("us"), py::arg("replay") = false);
  m.def("step_redo_rows", []() { return kRedoRows; }, "the most rows a step runs with redo (team_redo.h)");
  m.def("weight_prefetch", []() { return g_weight_prefetch; }, "the distance set_weight_prefetch set (0: off)");
  m.def("weight_prefetch_rows", []() { return g_weight_prefetch_rows; }, "the most rows a prefetched pass serves (set_weight_prefetch)");
  m.attr("ISA_FAMILY") = isa::kFamily;
  m.attr("INT8_MAX_ROWS") = isa::kMaxRows;
#if defined(SGLANG_ISA_AMX)
  m.def("amx_tile_rows", []() { return amx::enabled() ? amx::kMinRows : 0; },
        "the fewest rows of x whose int16 products run on AMX tiles (0: this process may not use them)");
#else
  m.def("amx_tile_rows", []() { return 0; }, "0: this library has no AMX tile kernels");
#endif
  m.def("q4_linear_i8", &q4_linear_i8, "x [M, K] float32 (quantized to int8 per block of 32) @ GGUF Q4 weight repacked in 8-row groups, N outputs",
        py::arg("x"), py::arg("weight"), py::arg("scales"), py::arg("out_features"), py::call_guard<py::gil_scoped_release>());
  m.def("q8_linear_i8", &q8_linear_i8, "x [M, K] float32 (quantized to int8 per block of 32) @ GGUF Q8_0 weight repacked in 8-row groups",
        py::arg("x"), py::arg("weight"), py::arg("scales"), py::arg("out_features"), py::call_guard<py::gil_scoped_release>());
  m.def("q4_linear_i16", &q4_linear_i16, "x [M, K] float32 (quantized to int16 per block of 32) @ GGUF Q4 weight repacked in 8-row groups",
        py::arg("x"), py::arg("weight"), py::arg("scales"), py::arg("out_features"), py::call_guard<py::gil_scoped_release>());
  m.def("q8_linear_i16", &q8_linear_i16, "x [M, K] float32 (quantized to int16 per block of 32) @ GGUF Q8_0 weight repacked in 8-row groups",
        py::arg("x"), py::arg("weight"), py::arg("scales"), py::arg("out_features"), py::call_guard<py::gil_scoped_release>());
  m.def("q4_linear_f32", &q4_linear_f32, "x [M, K] float32 @ packed GGUF Q4 weight (nibbles [N, K/2], scale/min [N, K/32, 2]).T",
        py::call_guard<py::gil_scoped_release>());
}
