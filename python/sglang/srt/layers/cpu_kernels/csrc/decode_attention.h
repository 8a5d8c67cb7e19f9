// Paged decode attention for the fused step: one query row per request (or a unit of rows of one
// request, attention_rows), K and V read in place from the pool's slots (pages of any size: a
// request's slots are listed one per token). Each query head's
// scores, softmax and weighted sum are float32; scores and probabilities are rounded to the model
// dtype T where the eager matmuls round them. Included by decode_step.cpp after vec.h.
//
// Both halves are written so that every accumulator chain is independent of the others and stays in
// registers: the form this replaced summed each (token, head) score as one chain of D/8 dependent FMAs
// and kept the weighted sums in memory, and ran at about 8 GFLOP/s (13 of a 33 ms step at 16
// requests of 200 tokens). One form, on W-float registers (Lanes8: one AVX2 register; Lanes16, where
// AVX-512 gives 32 of 16 floats: decode_attention_zmm.h):
//  - scores: W tokens at a time, W accumulators (one per token) against one query vector, the K rows
//    widened to float once per KV head for all the query heads that share it, reduced to W scores in
//    registers;
//  - weighted sum: up to 4 query heads x a chunk of the head (Lanes::chunk) accumulated per token from one
//    widened V chunk. On AVX2's 16 registers up to 3 heads x 4 vectors: the default model's 3 query heads a
//    KV head then take 2 passes over V, not 4 (Zen 1, one thread, 2,000-4,000 cached tokens: 1.23-1.35x the
//    layer's attention, the same bits); on AVX-512 4 heads x 4 vectors, the whole of a 64-element head.
// Rows are fetched kPrefetch tokens ahead: a request's slots are scattered over the pool, which
// defeats the hardware prefetcher at every page boundary. On the 2-core EPYC a thread reads scattered
// 384-byte rows at about 6 GB/s (DRAM latency about 185 ns) against 21 GB/s for the same rows in
// order, so at batch the step's attention is bound by that latency, not by its arithmetic.
#pragma once
#include <ATen/Parallel.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "vec.h"

namespace {

// exp(x) = 2^n p: n = x / ln 2 rounded to nearest (the 1.5 * 2^23 trick: std::nearbyint does not vectorize),
// p a polynomial in the remainder, to about 2 ulp in float32 for x in [-87, 88]; V is float or vf8 (the same
// operations lane by lane). Inputs here are <= 0 (softmax after the max shift).
template <typename V>
inline V exp_parts(V x, V* n) {
  *n = (x * 1.44269504088896341f + 12582912.f) - 12582912.f;
  const V r = (x - *n * 0.693359375f) + *n * 2.12194440e-4f;
  V p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.f;
}

// exp(x), written so that loops over it vectorize (std::exp does not)
inline float fast_exp(float x) {
  x = x < -87.f ? -87.f : (x > 88.f ? 88.f : x);
  float n;
  float p = exp_parts(x, &n);
  int32_t bits;
  std::memcpy(&bits, &p, 4);
  bits += static_cast<int32_t>(n) << 23;
  std::memcpy(&p, &bits, 4);
  return p;
}

// fast_exp on 8 lanes
inline vf8 fast_exp8(vf8 x) {
  x = x < -87.f ? vf8{} - 87.f : (x > 88.f ? vf8{} + 88.f : x);
  vf8 n;
  const vf8 p = exp_parts(x, &n);
  return (vf8)((vi8)p + (__builtin_convertvector(n, vi8) << 23));
}

// s[0..L) = softmax(s[0..L)), each probability rounded to T; stats (optional): the largest score and the
// denominator. Whole vectors of 8 explicitly: the loops this replaced (a scalar max, then exp-and-sum
// and normalize left to omp simd) took 14 of the 40 us of one request's layer of attention at 300 tokens
// on the AVX2 EPYC, in cache; these take about 3.
template <typename T>
inline void softmax_row(float* s, int64_t L, float* stats) {
  const int64_t L8 = L / 8 * 8;
  vf8 m8 = vf8{} - std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < L8; t += 8) {
    const vf8 v = load8(s + t);
    m8 = v > m8 ? v : m8;
  }
  float mx = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < 8; ++i) mx = m8[i] > mx ? m8[i] : mx;
  for (int64_t t = L8; t < L; ++t) mx = s[t] > mx ? s[t] : mx;
  vf8 sum8 = vf8{};
  for (int64_t t = 0; t < L8; t += 8) {
    const vf8 e = fast_exp8(load8(s + t) - mx);
    std::memcpy(s + t, &e, sizeof(e));
    sum8 += e;
  }
  float sum = hsum8(sum8);
  for (int64_t t = L8; t < L; ++t) {
    s[t] = fast_exp(s[t] - mx);
    sum += s[t];
  }
  for (int64_t t = 0; t < L8; t += 8) {
    vf8 v = load8(s + t) / sum;
    for (int i = 0; i < 8; ++i) v[i] = round_as<T>(v[i]);
    std::memcpy(s + t, &v, sizeof(v));
  }
  for (int64_t t = L8; t < L; ++t) s[t] = round_as<T>(s[t] / sum);
  if (stats != nullptr) {
    stats[0] = mx;
    stats[1] = sum;
  }
}

constexpr int64_t kPrefetch = 16;
constexpr int64_t kWholeRows = 32;  // requests from which a task takes all of a request's KV heads

// The shapes of one layer's attention and where its K/V live
template <typename KV>
struct AttnPool {
  const KV* k;
  const KV* v;
  int64_t kv_size;  // elements per slot: kv_heads x head_dim
};

// x rounded to T and back on each lane of the float vector type V (round_as's rule)
template <typename T, typename V>
inline V round_as_lanes(V x) {
  if constexpr (std::is_same<T, float>::value) {
    return x;
  } else {
    typedef uint32_t U __attribute__((vector_size(sizeof(V))));
    U u;
    std::memcpy(&u, &x, sizeof(u));
    const U r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    V y;
    std::memcpy(&y, &r, sizeof(y));
    return x != x ? x : y;
  }
}

// The 8-float form: one AVX2 register (GCC lowers wider vector types on an AVX2-only CPU through the stack)
struct Lanes8 {
  typedef vf8 V;
  static constexpr int W = 8;
  template <typename E>
  static V load(const E* p) { return load8(p); }
  static V lane_sums(V* a) { return lane_sums8(a); }
  // vectors of a head the next weighted pass takes from element vector c of NV, for gb query heads: 3 x 4
  // accumulators, one V vector and 3 broadcast probabilities fill AVX2's 16 registers, and a pass then reads
  // whole 64-byte lines of a bfloat16 V row; 2 (head sizes are multiples of 16) for 4 heads or a head's rest
  static int chunk(int64_t gb, int64_t left) { return gb <= 3 && left >= 4 ? 4 : 2; }
};

#if defined(__AVX512F__)
}  // namespace
#include "decode_attention_zmm.h"
namespace {
using Lanes = Lanes16;
#else
using Lanes = Lanes8;
#endif
// the tokens a block of scores takes, and so the rows of widened K a task's scratch kf holds
constexpr int64_t kKeyRows = Lanes::W;
// the stride of a row of scores for up to Lmax tokens: whole blocks of 16 (a block's scores are stored whole)
inline int64_t score_stride(int64_t Lmax) { return (Lmax + 15) / 16 * 16; }

// o[j, at' .. at' + W CW) for the GB query heads j whose probabilities are p[j * Lpad + t]: sum over the
// request's L tokens of p x V (the CW vectors at element `at` of each slot's row)
template <class Ln, int GB, int CW, typename O, typename KV>
void weighted_chunk(const AttnPool<KV>& pool, const int64_t* slots, int64_t L, int64_t at, const float* p, int64_t Lpad, O* o,
                    int64_t D) {
  typedef typename Ln::V V;
  constexpr int W = Ln::W;
  V acc[GB][CW];
  for (int j = 0; j < GB; ++j)
    for (int k = 0; k < CW; ++k) acc[j][k] = V{};
  for (int64_t t = 0; t < L; ++t) {
    if (t + kPrefetch < L) prefetch(pool.v + slots[t + kPrefetch] * pool.kv_size + at, CW * W * sizeof(KV));
    const KV* v = pool.v + slots[t] * pool.kv_size + at;
    V row[CW];
    for (int k = 0; k < CW; ++k) row[k] = Ln::load(v + W * k);
    for (int j = 0; j < GB; ++j) {
      const V pj = V{} + p[j * Lpad + t];
      for (int k = 0; k < CW; ++k) acc[j][k] += pj * row[k];
    }
  }
  for (int j = 0; j < GB; ++j)
    for (int k = 0; k < CW; ++k)
      for (int i = 0; i < W; ++i) o[j * D + W * k + i] = round_to<O>(acc[j][k][i]);
}

template <class Ln, int CW, typename O, typename KV>
void weighted_heads(int64_t gb, const AttnPool<KV>& pool, const int64_t* slots, int64_t L, int64_t at, const float* p, int64_t Lpad,
                    O* o, int64_t D) {
  switch (gb) {
    case 1: weighted_chunk<Ln, 1, CW>(pool, slots, L, at, p, Lpad, o, D); break;
    case 2: weighted_chunk<Ln, 2, CW>(pool, slots, L, at, p, Lpad, o, D); break;
    case 3: weighted_chunk<Ln, 3, CW>(pool, slots, L, at, p, Lpad, o, D); break;
    default: weighted_chunk<Ln, 4, CW>(pool, slots, L, at, p, Lpad, o, D); break;
  }
}

// W scores of query vector qj against the W key rows kr (NV vectors each), reduced in registers
template <class Ln>
inline typename Ln::V key_scores(const float* qj, const float* const* kr, int64_t NV) {
  typedef typename Ln::V V;
  constexpr int W = Ln::W;
  V s[W];
  for (int t = 0; t < W; ++t) s[t] = V{};
  for (int64_t i = 0; i < NV; ++i) {
    const V qi = Ln::load(qj + W * i);
    for (int t = 0; t < W; ++t) s[t] += qi * Ln::load(kr[t] + W * i);
  }
  return Ln::lane_sums(s);
}

// A unit: R query rows whose slot lists are each a prefix of the next row's (the rows of one request in a
// verify or a short prefill; row r attends to the first lens[r] slots of the last row's list). A unit's task
// reads each token's K and V rows (and widens K) once for all of its rows: at 5 verify rows and 300 cached
// tokens on the AVX2 EPYC, the rows attending one at a time re-read the request's K/V for every row (2.8 of
// a 12.5 ms step).
constexpr int64_t kUnitRows = 16;

// One task over a unit of R <= kUnitRows rows: tokens [ta, tb) of `slots` (row r's own there: [ta, min(tb,
// lens[r])), lens non-decreasing), KV heads [g0, g0 + per). q: row 0's float32 queries from the task's first
// query head, row r at q + r * qstride; o likewise (ostride). Scratch: sc [per * R * G, Lpad] (Lpad: a
// score_stride of at least tb - ta), kf [kKeyRows, D], ot [per * R * G, D] (unused when R == 1: the output goes to o directly); O: the
// output's type (float, or bfloat16 where a bfloat16 product reads it).
// stats (optional): row r's [per * G, 2] at stats + r * sstride, each query head's largest score and softmax
// denominator, from which team_step.h merges token ranges (split-KV decoding); a row with no tokens in the
// range gets denominator 0 and a zero output.
template <typename T, typename KV, typename O>
void attention_rows(const AttnPool<KV>& pool, const int64_t* slots, const int64_t* lens, int64_t R, int64_t ta, int64_t tb, int64_t g0,
                    int64_t per, int64_t G, int64_t D, float scale, const float* q, int64_t qstride, float* sc, int64_t Lpad, float* kf,
                    O* ot, O* o, int64_t ostride, float* stats = nullptr, int64_t sstride = 0) {
  assert(R >= 1 && R <= kUnitRows);  // the callers' invariant: run_team caps its units, attention_task passes 1
  typedef typename Lanes::V V;
  constexpr int W = Lanes::W;
  const int64_t NV = D / W, off = g0 * D, RG = R * G;
  int64_t own[kUnitRows], L = 0;  // row r's tokens in the range, and the most of them
  for (int64_t r = 0; r < R; ++r) {
    own[r] = std::max<int64_t>(0, std::min(tb, lens[r]) - ta);
    L = std::max(L, own[r]);
  }
  slots += ta;
  for (int64_t t0 = 0; t0 < L; t0 += W) {
    const int64_t n = std::min<int64_t>(W, L - t0);
    // K and V rows of the tokens kPrefetch ahead, toward L2: V's are read again only after the
    // softmax, by then every row of the request has been fetched once (measured: 5-10% of a 64-row step)
    for (int64_t t = t0 + kPrefetch; t < std::min(L, t0 + W + kPrefetch); ++t) {
      prefetch<1>(pool.k + slots[t] * pool.kv_size + off, per * D * static_cast<int64_t>(sizeof(KV)));
      prefetch<1>(pool.v + slots[t] * pool.kv_size + off, per * D * static_cast<int64_t>(sizeof(KV)));
    }
    for (int64_t g = 0; g < per; ++g) {
      const float* kr[W];
      for (int64_t tt = 0; tt < W; ++tt) {
        if (tt >= n) {
          kr[tt] = kr[0];  // a tail lane: computed, never read
          continue;
        }
        const KV* k = pool.k + slots[t0 + tt] * pool.kv_size + off + g * D;
        if constexpr (std::is_same<KV, float>::value) {
          kr[tt] = k;
        } else {
          for (int64_t i = 0; i < NV; ++i) {
            const V w = Lanes::load(k + W * i);
            std::memcpy(kf + tt * D + W * i, &w, sizeof(w));
          }
          kr[tt] = kf + tt * D;
        }
      }
      for (int64_t r = 0; r < R; ++r) {
        if (t0 >= own[r]) continue;  // past this row's tokens (lanes past them in a block: computed, never read)
        for (int64_t jj = 0; jj < G; ++jj) {
          const V sum = round_as_lanes<T>(key_scores<Lanes>(q + r * qstride + (g * G + jj) * D, kr, NV)) * scale;
          std::memcpy(sc + ((g * R + r) * G + jj) * Lpad + t0, &sum, sizeof(sum));  // whole: Lpad is a multiple of 16
        }
      }
    }
  }
  // probabilities [g][r][jj]: each row's own tokens, zeros past them (the weighted sum runs to L for all rows)
  for (int64_t g = 0; g < per; ++g)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t jj = 0; jj < G; ++jj) {
        float* p = sc + ((g * R + r) * G + jj) * Lpad;
        float* st = stats != nullptr ? stats + r * sstride + 2 * (g * G + jj) : nullptr;
        if (own[r] > 0) softmax_row<T>(p, own[r], st);
        else if (st != nullptr) st[0] = st[1] = 0.f;
        std::fill(p + own[r], p + L, 0.f);
      }
  for (int64_t g = 0; g < per; ++g) {
    const float* pg = sc + g * RG * Lpad;
    O* og = R == 1 ? o + g * G * D : ot + g * RG * D;  // one row: its heads are contiguous in o
    for (int64_t j0 = 0; j0 < RG; j0 += 4)
      for (int64_t c = 0; c < NV;) {
        const int64_t gb = std::min<int64_t>(4, RG - j0), at = off + g * D + W * c;
        const int cw = Lanes::chunk(gb, NV - c);
        const float* pj = pg + j0 * Lpad;
        O* oj = og + j0 * D + W * c;
        switch (cw) {
          case 4: weighted_heads<Lanes, 4>(gb, pool, slots, L, at, pj, Lpad, oj, D); break;
          case 2: weighted_heads<Lanes, 2>(gb, pool, slots, L, at, pj, Lpad, oj, D); break;
          default: weighted_heads<Lanes, 1>(gb, pool, slots, L, at, pj, Lpad, oj, D); break;
        }
        c += cw;
      }
  }
  if (R > 1)
    for (int64_t g = 0; g < per; ++g)
      for (int64_t r = 0; r < R; ++r)
        std::memcpy(o + r * ostride + g * G * D, ot + (g * R + r) * G * D, G * D * sizeof(O));
}

// One request's attention (a unit of one row) over its L >= 1 slots; the arguments as attention_rows'
template <typename T, typename KV, typename O>
void attention_task(const AttnPool<KV>& pool, const int64_t* slots, int64_t L, int64_t g0, int64_t per, int64_t G, int64_t D,
                    float scale, const float* qf, float* sc, int64_t Lpad, float* kf, O* o) {
  attention_rows<T, KV, O>(pool, slots, &L, 1, 0, L, g0, per, G, D, scale, qf, 0, sc, Lpad, kf, nullptr, o, 0);
}

// out [B, H * D] = attention of q [B, H * D] (one row per request) over each request's kv_lens[b] slots
// kv_index[b, :]. A task is one request's KV heads: all of them from kWholeRows requests up (each slot's
// K/V row read once), one each below, where more and smaller tasks balance the threads (in-process A/B on
// the 2-core EPYC, 300 cached tokens: 9% of a 5-row step, 6% at 6, 3% at 16; whole rows 2% better at 64).
template <typename T, typename KV, typename O = T>
void paged_attention(const T* qp, const AttnPool<KV>& pool, const int64_t* idx, const int64_t* lens, int64_t B, int64_t Lmax, int64_t H,
                     int64_t Hkv, int64_t D, O* op) {
  const int64_t G = H / Hkv, Lpad = score_stride(Lmax), per = B >= kWholeRows ? Hkv : 1, nq = per * G;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  at::parallel_for(0, B * (Hkv / per), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qf(nq * D), sc(nq * Lpad), kf(kKeyRows * D);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / (Hkv / per), g0 = (task % (Hkv / per)) * per;
      const T* qg = qp + b * H * D + g0 * G * D;  // query heads of KV heads g0.. are contiguous
      for (int64_t i = 0; i < nq * D; ++i) qf[i] = load_f(qg, i);
      attention_task<T, KV, O>(pool, idx + b * Lmax, lens[b], g0, per, G, D, scale, qf.data(), sc.data(), Lpad, kf.data(),
                               op + b * H * D + g0 * G * D);
    }
  });
}

}  // namespace
