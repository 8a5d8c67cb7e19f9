// Paged decode attention for the fused step: one query row per request (or a unit of rows of one
// request, attention_rows), K and V read in place from the pool's slots (pages of any size: a
// request's slots are listed one per token). Each query head's
// scores, softmax and weighted sum are float32; scores and probabilities are rounded to the model
// dtype T where the eager matmuls round them. Included by decode_step.cpp after vec.h.
//
// Both halves are written so that every accumulator chain is independent of the others and stays in
// registers: the form this replaced summed each (token, head) score as one chain of D/8 dependent FMAs
// and kept the weighted sums in memory, and ran at about 8 GFLOP/s (13 of a 33 ms step at 16
// requests of 200 tokens).
//  - scores: 8 tokens at a time, 8 accumulators (one per token) against one query vector, the K rows
//    widened to float once per KV head for all the query heads that share it;
//  - weighted sum: up to 4 query heads x kChunk vectors of the head accumulated per token from one
//    widened V chunk (kChunk: 4 where AVX-512 gives 32 registers, 2 on AVX2's 16), and up to 3 heads x
//    kChunkFew (4) everywhere: the default model's 3 query heads a KV head then take 2 passes over V, not 4
//    (Zen 1, one thread, 2,000-4,000 cached tokens: 1.23-1.35x the layer's attention, the same bits).
// Where AVX-512 is there, the same loops run on 16-float registers (decode_attention_zmm.h).
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
#if defined(__AVX512F__)
constexpr int kChunk = 4;
#else
constexpr int kChunk = 2;
#endif
// vectors a pass takes for up to 3 query heads: 3 x 4 accumulators, one V vector and 3 broadcast
// probabilities fill AVX2's 16 registers, and a pass then reads whole 64-byte lines of a bfloat16 V row
// (two passes of 2 vectors read each line twice, the second time from L3 at long contexts)
constexpr int kChunkFew = 4;

// The shapes of one layer's attention and where its K/V live
template <typename KV>
struct AttnPool {
  const KV* k;
  const KV* v;
  int64_t kv_size;  // elements per slot: kv_heads x head_dim
};

// o[j, c*8 .. (c+CW)*8) for the GB query heads j whose probabilities are p[j * Lpad + t]: sum over the
// request's L tokens of p x V (the CW vectors at element `at` of each slot's row)
template <int GB, int CW, typename O, typename KV>
void weighted_chunk(const AttnPool<KV>& pool, const int64_t* slots, int64_t L, int64_t at, const float* p, int64_t Lpad, O* o,
                    int64_t D) {
  vf8 acc[GB][CW];
  for (int j = 0; j < GB; ++j)
    for (int k = 0; k < CW; ++k) acc[j][k] = vf8{};
  for (int64_t t = 0; t < L; ++t) {
    if (t + kPrefetch < L) prefetch(pool.v + slots[t + kPrefetch] * pool.kv_size + at, CW * 8 * sizeof(KV));
    const KV* v = pool.v + slots[t] * pool.kv_size + at;
    vf8 row[CW];
    for (int k = 0; k < CW; ++k) row[k] = load8(v + 8 * k);
    for (int j = 0; j < GB; ++j) {
      const vf8 pj = vf8{} + p[j * Lpad + t];
      for (int k = 0; k < CW; ++k) acc[j][k] += pj * row[k];
    }
  }
  for (int j = 0; j < GB; ++j)
    for (int k = 0; k < CW; ++k)
      for (int i = 0; i < 8; ++i) o[j * D + 8 * k + i] = round_to<O>(acc[j][k][i]);
}

template <int CW, typename O, typename KV>
void weighted_heads(int64_t gb, const AttnPool<KV>& pool, const int64_t* slots, int64_t L, int64_t at, const float* p, int64_t Lpad,
                    O* o, int64_t D) {
  switch (gb) {
    case 1: weighted_chunk<1, CW>(pool, slots, L, at, p, Lpad, o, D); break;
    case 2: weighted_chunk<2, CW>(pool, slots, L, at, p, Lpad, o, D); break;
    case 3: weighted_chunk<3, CW>(pool, slots, L, at, p, Lpad, o, D); break;
    default: weighted_chunk<4, CW>(pool, slots, L, at, p, Lpad, o, D); break;
  }
}

// The tokens a block of scores takes, and so the rows of widened K a task's scratch kf holds: 16 where AVX-512's
// form (decode_attention_zmm.h) runs, else 8
#if defined(__AVX512F__)
constexpr int64_t kKeyRows = 16;
}  // namespace
#include "decode_attention_zmm.h"
namespace {
#else
constexpr int64_t kKeyRows = 8;
#endif

// A unit: R query rows whose slot lists are each a prefix of the next row's (the rows of one request in a
// verify or a short prefill; row r attends to the first lens[r] slots of the last row's list). A unit's task
// reads each token's K and V rows (and widens K) once for all of its rows: at 5 verify rows and 300 cached
// tokens on the AVX2 EPYC, the rows attending one at a time re-read the request's K/V for every row (2.8 of
// a 12.5 ms step).
constexpr int64_t kUnitRows = 16;

// One task over a unit of R <= kUnitRows rows: tokens [ta, tb) of `slots` (row r's own there: [ta, min(tb,
// lens[r])), lens non-decreasing), KV heads [g0, g0 + per). q: row 0's float32 queries from the task's first
// query head, row r at q + r * qstride; o likewise (ostride). Scratch: sc [per * R * G, Lpad] (Lpad >= tb - ta,
// a multiple of 16), kf [kKeyRows, D], ot [per * R * G, D] (unused when R == 1: the output goes to o directly); O: the
// output's type (float, or bfloat16 where a bfloat16 product reads it).
// stats (optional): row r's [per * G, 2] at stats + r * sstride, each query head's largest score and softmax
// denominator, from which team_step.h merges token ranges (split-KV decoding); a row with no tokens in the
// range gets denominator 0 and a zero output.
template <typename T, typename KV, typename O>
void attention_rows(const AttnPool<KV>& pool, const int64_t* slots, const int64_t* lens, int64_t R, int64_t ta, int64_t tb, int64_t g0,
                    int64_t per, int64_t G, int64_t D, float scale, const float* q, int64_t qstride, float* sc, int64_t Lpad, float* kf,
                    O* ot, O* o, int64_t ostride, float* stats = nullptr, int64_t sstride = 0) {
  assert(R >= 1 && R <= kUnitRows);  // the callers' invariant: run_team caps its units, attention_task passes 1
  const int64_t NV = D / 8, off = g0 * D, RG = R * G;
  int64_t own[kUnitRows], L = 0;  // row r's tokens in the range, and the most of them
  for (int64_t r = 0; r < R; ++r) {
    own[r] = std::max<int64_t>(0, std::min(tb, lens[r]) - ta);
    L = std::max(L, own[r]);
  }
  slots += ta;
#if defined(__AVX512F__)
  attention_rows16<T, KV, O>(pool, slots, own, R, L, g0, per, G, D, scale, q, qstride, sc, Lpad, kf, ot, o, ostride, stats, sstride);
  return;
#endif
  for (int64_t t0 = 0; t0 < L; t0 += 8) {
    const int64_t n = std::min<int64_t>(8, L - t0);
    // K and V rows of the tokens kPrefetch ahead, toward L2: V's are read again only after the
    // softmax, by then every row of the request has been fetched once (measured: 5-10% of a 64-row step)
    for (int64_t t = t0 + kPrefetch; t < std::min(L, t0 + 8 + kPrefetch); ++t) {
      prefetch<1>(pool.k + slots[t] * pool.kv_size + off, per * D * static_cast<int64_t>(sizeof(KV)));
      prefetch<1>(pool.v + slots[t] * pool.kv_size + off, per * D * static_cast<int64_t>(sizeof(KV)));
    }
    for (int64_t g = 0; g < per; ++g) {
      const float* kr[8];
      for (int64_t tt = 0; tt < 8; ++tt) {
        if (tt >= n) {
          kr[tt] = kr[0];  // a tail lane: computed, never read
          continue;
        }
        const KV* k = pool.k + slots[t0 + tt] * pool.kv_size + off + g * D;
        if constexpr (std::is_same<KV, float>::value) {
          kr[tt] = k;
        } else {
          for (int64_t i = 0; i < NV; ++i) {
            const vf8 w = load8(k + 8 * i);
            std::memcpy(kf + tt * D + 8 * i, &w, sizeof(w));
          }
          kr[tt] = kf + tt * D;
        }
      }
      for (int64_t r = 0; r < R; ++r) {
        if (t0 >= own[r]) continue;  // past this row's tokens (lanes past them in a block: computed, never read)
        for (int64_t jj = 0; jj < G; ++jj) {
          const float* qj = q + r * qstride + (g * G + jj) * D;
          vf8 s[8];
          for (int tt = 0; tt < 8; ++tt) s[tt] = vf8{};
          for (int64_t i = 0; i < NV; ++i) {
            const vf8 qi = load8(qj + 8 * i);
            for (int tt = 0; tt < 8; ++tt) s[tt] += qi * load8(kr[tt] + 8 * i);
          }
          const vf8 sum = lane_sums8(s);
          float* dst = sc + ((g * R + r) * G + jj) * Lpad + t0;
          for (int i = 0; i < 8; ++i) dst[i] = round_as<T>(sum[i]) * scale;
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
        const int64_t gb = std::min<int64_t>(4, RG - j0), at = off + g * D + 8 * c;
        if (gb <= 3 && NV - c >= kChunkFew) {
          weighted_heads<kChunkFew>(gb, pool, slots, L, at, pg + j0 * Lpad, Lpad, og + j0 * D + 8 * c, D);
          c += kChunkFew;
        } else if (NV - c >= kChunk) {
          weighted_heads<kChunk>(gb, pool, slots, L, at, pg + j0 * Lpad, Lpad, og + j0 * D + 8 * c, D);
          c += kChunk;
        } else {  // head sizes are multiples of 16: two vectors at a time finish any head
          weighted_heads<2>(gb, pool, slots, L, at, pg + j0 * Lpad, Lpad, og + j0 * D + 8 * c, D);
          c += 2;
        }
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
  const int64_t G = H / Hkv, Lpad = (Lmax + 15) / 16 * 16, per = B >= kWholeRows ? Hkv : 1, nq = per * G;
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
