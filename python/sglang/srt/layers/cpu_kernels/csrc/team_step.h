// The decode step of a float32 model whose products all run on the integer kernels (quant_linear.h),
// in ONE OpenMP parallel region: the team forks once a step and meets between phases (at a barrier, or for steps of
// up to kRedoRows rows by team_redo.h's marks, where a thread may take over a share another left overdue),
// where the per-op driver (DecodePlan::run_impl) forks and joins five regions a layer and calls
// ATen for the SiLU-and-mul and every output buffer (at one row on the 2-core EPYC, each of those
// ~150 regions cost 1-4 us, and the layer's ATen calls about as much again). A layer's phases:
//   rows:      h += the previous layer's down output; x = RMSNorm(h), quantized for qkv
//   qkv:       the product, output groups split between the threads
//   rotary:    q and k heads rotated, K and V written to their slots (a barrier follows: a row of a
//              verify or a short prefill attends to the slots the rows before it write)
//   attention: one task per (unit, KV heads), its output quantized for o in place (a unit: the rows of one
//              request in a verify or a short prefill, which read its K/V once; a decode row alone); a unit
//              longer than kChunkTokens one task per (KV heads, chunk of kChunkTokens tokens), and a phase that
//              merges each row's chunks (the same chunks and sums for a row in any batch)
//   o:         the product
//   rows:      h += o; x = RMSNorm(h), quantized for gate_up
//   gate_up:   the product
//   silu:      act = SiLU(gate) * up per block of 32, quantized for down
//   down:      the product
// and, for DecodePlan::run_logits, after the last layer: the final RMSNorm of the rows whose logits are wanted,
// quantized for the LM head, and its product (the head's groups split between the threads)
// Nothing in the region allocates or throws (redo mode's buffers are allocated before it): every shape is
// checked when the layers are resolved (resolve_team), and a plan that does not qualify runs the per-op driver.
// Included by decode_step.cpp.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "decode_attention.h"
#include "plan_layers.h"
#include "team_redo.h"

namespace {

// One linear layer's integer kernel for a batch size: its repacked blocks and arithmetic.
struct IntProduct {
  bool i16 = false;  // int16 activations (else int8)
  bool q8 = false;   // Q8_0 blocks (else Q4)
  const uint8_t* w = nullptr;
  const uint16_t* sm = nullptr;
  const float* bias = nullptr;
  int64_t N = 0, K = 0;
};

struct TeamLayer {
  IntProduct qkv, o, gate_up, down;
};

// The integer kernel `lin` runs for B rows, if it is one whose blocks fit (false: the per-op driver runs it)
inline bool resolve_product(const Linear& lin, int64_t B, IntProduct* p) {
  for (const auto& k : lin.kernels) {
    if (k.max_batch != 0 && B > k.max_batch) continue;
    const bool i8 = k.kind == "q4_i8" || k.kind == "q8_i8", i16 = k.kind == "q4_i16" || k.kind == "q8_i16";
    if (!i8 && !i16) return false;
    const bool q8 = k.kind[1] == '8';
    const int64_t K = k.in_features, N = k.out_features;
    const bool fits = q8 ? weight_fits<Q8I8>(k.weight, K, N) && scales_fit<Q8I8>(k.scales, K, N) && k.weight.scalar_type() == at::kChar
                         : weight_fits<Q4I8>(k.weight, K, N) && scales_fit<Q4I8>(k.scales, K, N) && k.weight.scalar_type() == at::kByte;
    if (!fits) return false;
    if (lin.bias.defined() && (lin.bias.scalar_type() != at::kFloat || !lin.bias.is_contiguous() || lin.bias.numel() != N)) return false;
    *p = IntProduct{i16, q8, static_cast<const uint8_t*>(k.weight.data_ptr()), reinterpret_cast<const uint16_t*>(k.scales.data_ptr<at::Half>()),
                    lin.bias.defined() ? lin.bias.data_ptr<float>() : nullptr, N, K};
    return true;
  }
  return false;
}

// Every layer's four products for B rows, or an empty vector when one of them is not an integer kernel
inline std::vector<TeamLayer> resolve_team(const std::vector<Layer>& layers, int64_t B) {
  std::vector<TeamLayer> out(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    TeamLayer& t = out[i];
    if (!resolve_product(l.qkv, B, &t.qkv) || !resolve_product(l.o, B, &t.o) || !resolve_product(l.gate_up, B, &t.gate_up) ||
        !resolve_product(l.down, B, &t.down))
      return {};
  }
  return out;
}

// The quantized activations of a product's input (run_team's buffers): B rows of K, row r at r * K elements of
// the product's integer type (int8 rows use the first half of the buffer), block scales d and sums s [B, K / 32]
struct QuantRows {
  int16_t* q;
  float *d, *s;
  void* row(bool i16, int64_t r, int64_t K) const {
    return i16 ? static_cast<void*>(q + r * K) : static_cast<void*>(reinterpret_cast<int8_t*>(q) + r * K);
  }
};

// Blocks [b0, b1) of row r of the input of product p, from x (float32, at block b0) into `to`
inline void quantize_blocks(const IntProduct& p, const float* x, int64_t r, int64_t b0, int64_t b1, QuantRows& to) {
  const int64_t nb = p.K / 32;
  void* q = to.row(p.i16, r, p.K);
  for (int64_t b = b0; b < b1; ++b) {
    float* d = to.d + r * nb + b;
    float* s = to.s + r * nb + b;
    const float* xb = x + 32 * (b - b0);
    if (p.i16) I16Act::quantize(xb, static_cast<int16_t*>(q) + 32 * b, d, s);
    else I8Act::quantize(xb, static_cast<int8_t*>(q) + 32 * b, d, s, p.q8);
  }
}

// y [M, N] columns of groups [g0, g1) (plus the bias there) from quantized rows
inline void product_groups(const IntProduct& p, QuantRows& x, float* y, int64_t M, int64_t g0, int64_t g1) {
  const void* xq = x.row(p.i16, 0, p.K);
  if (p.i16 && p.q8) quant_groups<I16Act, Q8I16>(p.w, p.sm, static_cast<const int16_t*>(xq), x.d, x.s, y, M, p.K, p.N, g0, g1);
  else if (p.i16) quant_groups<I16Act, Q4I16>(p.w, p.sm, static_cast<const int16_t*>(xq), x.d, x.s, y, M, p.K, p.N, g0, g1);
  else if (p.q8) quant_groups<I8Act, Q8I8>(p.w, p.sm, static_cast<const int8_t*>(xq), x.d, x.s, y, M, p.K, p.N, g0, g1);
  else quant_groups<I8Act, Q4I8>(p.w, p.sm, static_cast<const int8_t*>(xq), x.d, x.s, y, M, p.K, p.N, g0, g1);
  if (p.bias != nullptr)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = g0 * 8; n < std::min(g1 * 8, p.N); ++n) y[m * p.N + n] += p.bias[n];
}

// The shapes and inputs of one step (checked by DecodePlan::run and run_logits)
struct TeamInputs {
  float* h;  // [B, hidden] residual stream, updated in place
  const float *cos, *sin;  // [B, D]
  const int64_t *idx, *lens, *loc;  // kv_index [B, Lmax], kv_lens [B], out_loc [B]
  int64_t B, hidden, Lmax, H, Hkv, D;
  float eps;
};

// The LM head after the last layer (DecodePlan::run_logits): rows[r] of the residual stream, RMSNormed with
// `norm` and quantized for p, multiplied into logits [R, p.N]; R is at most the step's B (checked by the caller)
struct TeamHead {
  IntProduct p;
  const float* norm;
  const int64_t* rows;
  int64_t R;
  float* logits;
};

// The team's plan holds for this model: the attention heads of a task are whole blocks of 32 (their output is
// quantized by the task), and the layers' norms are float32
inline bool team_fits(const std::vector<Layer>& layers, int64_t H, int64_t Hkv, int64_t D) {
  if ((H / Hkv * D) % 32 != 0) return false;
  for (const Layer& l : layers)
    if (l.input_norm.scalar_type() != at::kFloat || l.post_norm.scalar_type() != at::kFloat) return false;
  return true;
}

// h[r] = a[r] + b[r] over rows [r0, r1) of `width` floats (h may be a: add_into's in-place sum, the same bits)
inline void add_rows(float* h, const float* a, const float* b, int64_t r0, int64_t r1, int64_t width) {
  for (int64_t r = r0; r < r1; ++r) {
    float* hr = h + r * width;
    const float* ar = a + r * width;
    const float* br = b + r * width;
#pragma omp simd
    for (int64_t i = 0; i < width; ++i) hr[i] = ar[i] + br[i];
  }
}

// Tokens of a chunk of a long row's attention (run_team). Fixed, so that a row's sums depend on its own length only;
// 512: the default model's rows up to 512 tokens take one pass, as before chunks, and a 4,096-token row 8 chunks.
constexpr int64_t kChunkTokens = 512;

// One attention task of a step: unit u's KV heads from g0 (as many as the step's tasks take), over its tokens
// (chunk < 0) or chunk `chunk` of them
struct AttnTask {
  int64_t u, chunk, g0;
};

template <typename KV>
void run_team(std::vector<Layer>& layers, const std::vector<TeamLayer>& team, const TeamInputs& in, const TeamHead* head = nullptr) {
  const int64_t B = in.B, hidden = in.hidden, D = in.D, H = in.H, Hkv = in.Hkv, G = H / Hkv;
  const int64_t qs = H * D, kvs = Hkv * D, width = qs + 2 * kvs, inter = team.front().gate_up.N / 2;
  const int64_t NL = static_cast<int64_t>(layers.size());
  at::internal::lazy_init_num_threads();
  const int nt = std::max(1, at::get_num_threads());
  // Attention units (decode_attention.h): runs of rows whose slot lists are each a prefix of the next row's, so
  // that a verify's or a short prefill's rows of one request read its K/V once; a decode row is a unit of its own
  std::vector<int64_t> unit{0};  // unit u: rows [unit[u], unit[u + 1])
  int64_t rmax = 1;
  for (int64_t b = 1; b < B; ++b) {
    const int64_t lp = in.lens[b - 1];
    if (b - unit.back() >= kUnitRows || in.lens[b] < lp ||
        std::memcmp(in.idx + (b - 1) * in.Lmax, in.idx + b * in.Lmax, lp * sizeof(int64_t)) != 0)
      unit.push_back(b);
    rmax = std::max(rmax, b + 1 - unit.back());
  }
  const int64_t U = static_cast<int64_t>(unit.size());
  unit.push_back(B);
  // Attention tasks (AttnTask). A row's attention is computed the same way whatever else is in the step: over
  // its tokens at once up to kChunkTokens, else over fixed chunks of kChunkTokens merged in order (the chunks
  // depend on the row's own length only), so a request's tokens do not change with the batch it runs in, and a
  // verify row's logits are the decode row's bits. (Split-KV over one range per thread, taken only where a
  // batch had fewer tasks than two a thread, made a lone request's sums differ from the same request's in a
  // batch or a verify, and near-ties flipped.) A task is one unit's KV heads (all of them from kWholeRows units
  // up) over its tokens or one chunk of them.
  std::vector<int64_t> chunks(U);  // unit u's chunks (1: not chunked)
  int64_t S = 1;
  for (int64_t u = 0; u < U; ++u) {
    const int64_t L = in.lens[unit[u + 1] - 1];
    chunks[u] = L > kChunkTokens ? (L + kChunkTokens - 1) / kChunkTokens : 1;
    S = std::max(S, chunks[u]);
  }
  const int64_t per = U >= kWholeRows ? Hkv : 1;
  std::vector<AttnTask> attn_tasks;
  std::vector<int64_t> merged_rows;  // rows of chunked units: their chunks merged (or the one they have copied)
  for (int64_t u = 0; u < U; ++u) {
    // a unit's chunks side by side under each KV head, so that a thread's share takes long and short chunks alike
    // (one request of 800 tokens: chunks of 512 and 288, 1,312 token-heads a thread against 1,088, not 1,536 against 864)
    for (int64_t g0 = 0; g0 < Hkv; g0 += per)
      for (int64_t c = 0; c < chunks[u]; ++c) attn_tasks.push_back({u, chunks[u] > 1 ? c : -1, g0});
    if (chunks[u] > 1)
      for (int64_t r = unit[u]; r < unit[u + 1]; ++r) merged_rows.push_back(r);
  }
  const int64_t tasks = static_cast<int64_t>(attn_tasks.size()), nq = per * G * rmax;
  const int64_t Lpad = score_stride(std::min(in.Lmax, kChunkTokens));
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  const int64_t kmax = std::max<int64_t>({hidden, qs, inter});
  // The step's buffers. Barrier mode: one set, rewritten layer after layer, and h updated in place. Redo mode
  // (team_redo.h): every layer its own (what a phase writes, no later phase of the step writes), h out of place
  // (the layer's input, after attention, its output), kept across steps by the calling thread.
  // (a product's bias is added to its output in place, which a share computed twice at once could add twice: a model
  // with biases keeps the barriers)
  bool biased = head != nullptr && head->p.bias != nullptr;
  for (const TeamLayer& t : team) biased = biased || t.qkv.bias || t.o.bias || t.gate_up.bias || t.down.bias;
  const bool redo = g_step_redo && nt >= 2 && nt <= kRedoTeam && B <= kRedoRows && !biased;
  const int64_t sets = redo ? NL : 1, nb_max = B * kmax / 32;
  const int64_t f_qkv = B * width, f_q = B * qs, f_attn = B * qs, f_o = B * hidden, f_gu = B * 2 * inter, f_dn = B * hidden,
                f_parts = S > 1 ? S * B * qs : 0, f_stats = S > 1 ? S * B * H * 2 : 0, f_h = redo ? 2 * B * hidden : 0;
  // (parts and stats: chunk c of row r at c * B + r)
  const int64_t f_layer = f_qkv + f_q + f_attn + f_o + f_gu + f_dn + f_parts + f_stats + f_h;
  // each layer's four quantized inputs (redo), or one shared by every product (barrier): B * kmax values, 2 x nb_max scales
  const int64_t quants = redo ? 4 * NL + 1 : 1, f_quant = 2 * nb_max, i_quant = B * kmax;
  const int64_t phases = NL * 10 + 3;
  std::vector<float> own_floats;
  std::vector<int16_t> own_ints;
  RedoState* rs = nullptr;
  float* fbase;
  int16_t* ibase;
  const int64_t n_floats = sets * f_layer + quants * f_quant, n_ints = quants * i_quant;
  if (redo) {
    rs = &redo_state(phases, n_floats, n_ints);
    fbase = rs->floats.data();
    ibase = rs->ints.data();
  } else {
    own_floats.resize(n_floats);
    own_ints.resize(n_ints);
    fbase = own_floats.data();
    ibase = own_ints.data();
  }
  struct LayerBufs {
    float *qkv, *q, *attn, *o, *gu, *dn, *parts, *stats, *h_mid, *h_out;
  };
  std::vector<LayerBufs> lb(NL);
  for (int64_t li = 0; li < NL; ++li) {
    float* p = fbase + (redo ? li : 0) * f_layer;
    LayerBufs& b = lb[li];
    b.qkv = p, p += f_qkv;
    b.q = p, p += f_q;
    b.attn = p, p += f_attn;
    b.o = p, p += f_o;
    b.gu = p, p += f_gu;
    b.dn = p, p += f_dn;
    b.parts = p, p += f_parts;
    b.stats = p, p += f_stats;
    b.h_mid = redo ? p : in.h;  // h after the layer's attention
    b.h_out = redo ? p + B * hidden : in.h;  // h after its MLP: the next layer's input
  }
  // quantized input k (redo: layer li's product j at 4 li + j, the LM head's last; barrier: 0 for all)
  auto quant = [&](int64_t k) {
    return QuantRows{ibase + k * i_quant, fbase + sets * f_layer + k * f_quant, fbase + sets * f_layer + k * f_quant + nb_max};
  };
  std::vector<QuantRows> xqs;
  for (int64_t k = 0; k < quants; ++k) xqs.push_back(quant(k));
  auto xq_of = [&](int64_t li, int j) -> QuantRows& { return xqs[redo ? (li < 0 ? 4 * NL : 4 * li + j) : 0]; };
  struct Buffers {
    const float *input_norm, *post_norm;
    KV *k, *v;
  };
  std::vector<Buffers> bufs;
  for (Layer& l : layers)
    bufs.push_back({l.input_norm.data_ptr<float>(), l.post_norm.data_ptr<float>(), l.k_cache.data_ptr<KV>(), l.v_cache.data_ptr<KV>()});
  uint64_t* marks = redo ? rs->marks.data() : nullptr;
  const uint64_t epoch = redo ? rs->epoch : 0, margin = redo ? rs->margin : 0, grace = redo ? rs->grace : 0;
  const float* h_last = lb.back().h_out;  // the residual stream after the last layer
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num(), n_threads = omp_get_num_threads();
    std::vector<float> sc(nq * Lpad), kf(kKeyRows * D), ot(rmax > 1 ? nq * D : 0), krot(D), xr(hidden), wts(S);
    int64_t p_at = 0;  // this thread's phase: every thread calls the same phases in the same order
    auto phase = [&](int64_t n, auto&& work) {
      team_phase(tid, n_threads, n, marks != nullptr ? marks + p_at * kRedoTeam : nullptr, epoch, margin, grace, work, p_at);
      ++p_at;
    };
    // rows [r0, r1): h_to = h_from (+ add, if any); x = RMSNorm(h_to) quantized for p into `to`
    auto rows = [&](int64_t r0, int64_t r1, float* h_to, const float* h_from, const float* add, const float* norm, const IntProduct& p,
                    QuantRows& to) {
      if (add != nullptr) add_rows(h_to, h_from, add, r0, r1, hidden);
      for (int64_t r = r0; r < r1; ++r) {
        rms_norm_row<float>(h_to + r * hidden, norm, xr.data(), hidden, in.eps);
        quantize_blocks(p, xr.data(), r, 0, hidden / 32, to);
      }
    };
    auto product = [&](const IntProduct& p, QuantRows& x, float* y) {
      phase((p.N + 7) / 8, [&](int64_t g0, int64_t g1) { product_groups(p, x, y, B, g0, g1); });
    };
    for (int64_t li = 0; li < NL; ++li) {
      const Buffers& l = bufs[li];
      const TeamLayer& t = team[li];
      const LayerBufs& b = lb[li];
      QuantRows &xq_qkv = xq_of(li, 0), &xq_o = xq_of(li, 1), &xq_gu = xq_of(li, 2), &xq_dn = xq_of(li, 3);
      // the layer's input: in.h for the first, else the previous layer's h after attention plus its down output
      float* h_in = li == 0 ? in.h : lb[li - 1].h_out;
      phase(B, [&](int64_t r0, int64_t r1) {
        if (li == 0) rows(r0, r1, in.h, in.h, nullptr, l.input_norm, t.qkv, xq_qkv);
        else rows(r0, r1, h_in, lb[li - 1].h_mid, lb[li - 1].dn, l.input_norm, t.qkv, xq_qkv);
      });
      product(t.qkv, xq_qkv, b.qkv);
      phase(B * (H + Hkv), [&](int64_t i0, int64_t i1) {  // rotary: one item per (row, q or KV head)
        KV* kc = l.k;
        KV* vc = l.v;
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t r = i / (H + Hkv), hh = i % (H + Hkv);
          const float* row = b.qkv + r * width;
          const float* c = in.cos + r * D;
          const float* s = in.sin + r * D;
          if (hh < H) {
            rope_head<float>(row + hh * D, c, s, b.q + r * qs + hh * D, D);
            continue;
          }
          const int64_t kh = hh - H;
          KV* kd = kc + in.loc[r] * kvs + kh * D;
          KV* vd = vc + in.loc[r] * kvs + kh * D;
          const float* v = row + qs + kvs + kh * D;
          if constexpr (std::is_same<KV, float>::value) {
            rope_head<float>(row + qs + kh * D, c, s, kd, D);
            std::memcpy(vd, v, D * sizeof(float));
          } else {
            rope_head<float>(row + qs + kh * D, c, s, krot.data(), D);
            for (int64_t j = 0; j < D; ++j) {
              kd[j] = round_to<KV>(krot[j]);
              vd[j] = round_to<KV>(v[j]);
            }
          }
        }
      });
      // attention: a direct task's output quantized for o; a chunk's output and softmax statistics kept for the merge
      phase(tasks, [&](int64_t t0, int64_t t1) {
        const AttnPool<KV> pool{l.k, l.v, kvs};
        for (int64_t i = t0; i < t1; ++i) {
          const AttnTask& task = attn_tasks[i];
          const int64_t b0 = unit[task.u], R = unit[task.u + 1] - b0, L = in.lens[b0 + R - 1], h0 = task.g0 * G;
          const int64_t ta = task.chunk >= 0 ? task.chunk * kChunkTokens : 0;
          const int64_t tb = task.chunk >= 0 ? std::min(L, ta + kChunkTokens) : L;
          const int64_t* slots = in.idx + (b0 + R - 1) * in.Lmax;
          if (task.chunk < 0) {
            attention_rows<float, KV, float>(pool, slots, in.lens + b0, R, ta, tb, task.g0, per, G, D, scale, b.q + b0 * qs + h0 * D, qs,
                                             sc.data(), Lpad, kf.data(), ot.data(), b.attn + b0 * qs + h0 * D, qs);
            for (int64_t r = b0; r < b0 + R; ++r)
              quantize_blocks(t.o, b.attn + r * qs + h0 * D, r, h0 * D / 32, (h0 + per * G) * D / 32, xq_o);
          } else {
            const int64_t at = task.chunk * B + b0;
            attention_rows<float, KV, float>(pool, slots, in.lens + b0, R, ta, tb, task.g0, per, G, D, scale, b.q + b0 * qs + h0 * D, qs,
                                             sc.data(), Lpad, kf.data(), ot.data(), b.parts + at * qs + h0 * D, qs,
                                             b.stats + (at * H + h0) * 2, H * 2);
          }
        }
      });
      if (!merged_rows.empty()) {
        // a chunked unit's row: o = sum_c w_c o_c / sum_c w_c, w_c = l_c exp(m_c - max m), over its own chunks in order
        // (the softmax over all of them); a row whose tokens fit in its first chunk takes that chunk's output as it is
        phase(static_cast<int64_t>(merged_rows.size()) * Hkv, [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t r = merged_rows[i / Hkv], g = i % Hkv, Kr = (in.lens[r] + kChunkTokens - 1) / kChunkTokens;
            for (int64_t j = g * G; j < (g + 1) * G; ++j) {
              float* out = b.attn + r * qs + j * D;
              if (Kr == 1) {
                std::memcpy(out, b.parts + r * qs + j * D, D * sizeof(float));
                continue;
              }
              float top = -std::numeric_limits<float>::infinity(), wsum = 0.f;
              for (int64_t c = 0; c < Kr; ++c) top = std::max(top, b.stats[((c * B + r) * H + j) * 2]);
              for (int64_t c = 0; c < Kr; ++c) {
                const float* st = b.stats + ((c * B + r) * H + j) * 2;
                wts[c] = st[1] * fast_exp(st[0] - top);
                wsum += wts[c];
              }
              for (int64_t d = 0; d < D; d += 8) {  // head sizes are multiples of 16
                vf8 acc = vf8{};
                for (int64_t c = 0; c < Kr; ++c) acc += wts[c] * load8(b.parts + (c * B + r) * qs + j * D + d);
                acc /= wsum;
                std::memcpy(out + d, &acc, sizeof(acc));
              }
            }
            quantize_blocks(t.o, b.attn + r * qs + g * G * D, r, g * G * D / 32, (g + 1) * G * D / 32, xq_o);
          }
        });
      }
      product(t.o, xq_o, b.o);
      phase(B, [&](int64_t r0, int64_t r1) { rows(r0, r1, b.h_mid, h_in, b.o, l.post_norm, t.gate_up, xq_gu); });
      product(t.gate_up, xq_gu, b.gu);
      // act = SiLU(gate) * up (silu_mul8), a block of 32 at a time, quantized for down
      const int64_t nb = inter / 32;
      phase(B * nb, [&](int64_t i0, int64_t i1) {
        alignas(32) float a[32];
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t r = i / nb, k = i % nb;
          const float* g = b.gu + r * 2 * inter + 32 * k;
          const float* u = g + inter;
          for (int j = 0; j < 32; j += 8) {
            const vf8 aj = silu_mul8(load8(g + j), load8(u + j));
            std::memcpy(a + j, &aj, sizeof(aj));
          }
          quantize_blocks(t.down, a, r, k, k + 1, xq_dn);
        }
      });
      product(t.down, xq_dn, b.dn);
    }
    // the last layer's output: h += down (in place in barrier mode; into its own buffer in redo mode)
    const LayerBufs& last = lb.back();
    if (head == nullptr && marks == nullptr) {
      int64_t r0, r1;
      share(B, tid, n_threads, &r0, &r1);
      add_rows(last.h_out, last.h_mid, last.dn, r0, r1, hidden);  // the region's end is the barrier
    } else {
      phase(B, [&](int64_t r0, int64_t r1) { add_rows(last.h_out, last.h_mid, last.dn, r0, r1, hidden); });
    }
    if (head != nullptr) {  // the final norm and the LM head, in the same region (a row may be another thread's)
      QuantRows& xq_head = xq_of(-1, 0);
      phase(head->R, [&](int64_t a0, int64_t a1) {
        for (int64_t r = a0; r < a1; ++r) {
          rms_norm_row<float>(h_last + head->rows[r] * hidden, head->norm, xr.data(), hidden, in.eps);
          quantize_blocks(head->p, xr.data(), r, 0, hidden / 32, xq_head);
        }
      });
      phase((head->p.N + 7) / 8, [&](int64_t g0, int64_t g1) { product_groups(head->p, xq_head, head->logits, head->R, g0, g1); });
    }
  }
  if (redo) std::memcpy(in.h, h_last, B * hidden * sizeof(float));  // after the region: no thread reads in.h any more
}

}  // namespace
