// The AVX-512 form of decode_attention.h's attention_rows: the same unit of rows, scratch and results, on
// 16-float registers (32 of them). Included by decode_attention.h where __AVX512F__ is defined.
//  - scores: 16 tokens at a time, 16 accumulators (one per token) against one query vector from K rows
//    widened to float once per KV head for all the query rows that share it, reduced to 16 scores in
//    registers;
//  - weighted sum: up to 4 query heads x 4 registers (64 elements of the head) per pass over V, each
//    token's V chunk widened once for all of them.
// On the AMX Xeon (2 threads, 64 requests of 101 bfloat16 tokens, 30 layers) 5.8 ms against the 8-float form's 7.8
// with K/V in L1, 11.2 against 13.5 with each request's slots in one run, 16.2 against 20.2 with pages of 1
// interleaved: the rest is the reads of K/V.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "vec.h"

namespace {

typedef float vf16 __attribute__((vector_size(64)));

inline vf16 load16(const float* p) {
  vf16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline vf16 load16(const c10::BFloat16* p) {
  return (vf16)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
}

// 16 vectors -> one vector whose lane i is the sum of a[i]'s lanes (4 levels of shuffles and adds)
inline vf16 lane_sums16(vf16* a) {
  for (int i = 0; i < 8; ++i)
    a[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30) +
           __builtin_shufflevector(a[2 * i], a[2 * i + 1], 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
  for (int i = 0; i < 4; ++i)
    a[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29) +
           __builtin_shufflevector(a[2 * i], a[2 * i + 1], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  for (int i = 0; i < 2; ++i)
    a[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27) +
           __builtin_shufflevector(a[2 * i], a[2 * i + 1], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  return __builtin_shufflevector(a[0], a[1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
         __builtin_shufflevector(a[0], a[1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
}

// round_as on 16 lanes
template <typename T>
inline vf16 round_as16(vf16 x) {
  if constexpr (std::is_same<T, float>::value) {
    return x;
  } else {
    typedef uint32_t vu16 __attribute__((vector_size(64)));
    const vu16 u = (vu16)x;
    const vf16 y = (vf16)((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
    return x != x ? x : y;
  }
}

// scores of 16 tokens (rows kr[0..16) of NV16 x 16 floats) against one query head qj: one vector of 16
template <int NV16>
inline vf16 scores16(const float* qj, const float* const* kr) {
  vf16 s[16];
  for (int t = 0; t < 16; ++t) s[t] = vf16{};
  for (int i = 0; i < NV16; ++i) {
    const vf16 qi = load16(qj + 16 * i);
    for (int t = 0; t < 16; ++t) s[t] += qi * load16(kr[t] + 16 * i);
  }
  return lane_sums16(s);
}

// o[j, at' .. at' + 16 CW) for GB heads (probabilities p[j * Lpad + t]) over L tokens of the V chunk at `at`
template <int GB, int CW, typename O, typename KV>
void weighted16(const AttnPool<KV>& pool, const int64_t* slots, int64_t L, int64_t at, const float* p, int64_t Lpad, O* o, int64_t D) {
  vf16 acc[GB][CW];
  for (int j = 0; j < GB; ++j)
    for (int k = 0; k < CW; ++k) acc[j][k] = vf16{};
  for (int64_t t = 0; t < L; ++t) {
    const KV* v = pool.v + slots[t] * pool.kv_size + at;
    vf16 row[CW];
    for (int k = 0; k < CW; ++k) row[k] = load16(v + 16 * k);
    for (int j = 0; j < GB; ++j) {
      const vf16 pj = vf16{} + p[j * Lpad + t];
      for (int k = 0; k < CW; ++k) acc[j][k] += pj * row[k];
    }
  }
  for (int j = 0; j < GB; ++j)
    for (int k = 0; k < CW; ++k)
      for (int i = 0; i < 16; ++i) o[j * D + 16 * k + i] = round_to<O>(acc[j][k][i]);
}

template <int CW, typename O, typename KV>
void weighted16_heads(int64_t gb, const AttnPool<KV>& pool, const int64_t* slots, int64_t L, int64_t at, const float* p, int64_t Lpad,
                      O* o, int64_t D) {
  switch (gb) {
    case 1: weighted16<1, CW>(pool, slots, L, at, p, Lpad, o, D); break;
    case 2: weighted16<2, CW>(pool, slots, L, at, p, Lpad, o, D); break;
    case 3: weighted16<3, CW>(pool, slots, L, at, p, Lpad, o, D); break;
    default: weighted16<4, CW>(pool, slots, L, at, p, Lpad, o, D); break;
  }
}

// attention_rows' contract (decode_attention.h) past its row count: own[r] is row r's tokens in the range (slots
// already at the range's start), L the most of them; head sizes D are multiples of 16 (the plan's check), kf [16, D]
template <typename T, typename KV, typename O>
void attention_rows16(const AttnPool<KV>& pool, const int64_t* slots, const int64_t* own, int64_t R, int64_t L, int64_t g0,
                      int64_t per, int64_t G, int64_t D, float scale, const float* q, int64_t qstride, float* sc, int64_t Lpad,
                      float* kf, O* ot, O* o, int64_t ostride, float* stats, int64_t sstride) {
  const int64_t NV = D / 16, off = g0 * D, RG = R * G;
  for (int64_t t0 = 0; t0 < L; t0 += 16) {
    const int64_t n = std::min<int64_t>(16, L - t0);
    for (int64_t t = t0 + kPrefetch; t < std::min(L, t0 + 16 + kPrefetch); ++t) {
      prefetch<1>(pool.k + slots[t] * pool.kv_size + off, per * D * static_cast<int64_t>(sizeof(KV)));
      prefetch<1>(pool.v + slots[t] * pool.kv_size + off, per * D * static_cast<int64_t>(sizeof(KV)));
    }
    for (int64_t g = 0; g < per; ++g) {
      const float* kr[16];
      for (int64_t tt = 0; tt < 16; ++tt) {
        if (tt >= n) {
          kr[tt] = kr[0];  // a tail lane: computed, never read
          continue;
        }
        const KV* k = pool.k + slots[t0 + tt] * pool.kv_size + off + g * D;
        if constexpr (std::is_same<KV, float>::value) {
          kr[tt] = k;
        } else {
          for (int64_t i = 0; i < NV; ++i) {
            const vf16 w = load16(k + 16 * i);
            std::memcpy(kf + tt * D + 16 * i, &w, sizeof(w));
          }
          kr[tt] = kf + tt * D;
        }
      }
      for (int64_t r = 0; r < R; ++r) {
        if (t0 >= own[r]) continue;
        for (int64_t jj = 0; jj < G; ++jj) {
          const float* qj = q + r * qstride + (g * G + jj) * D;
          vf16 sum;
          switch (NV) {
            case 4: sum = scores16<4>(qj, kr); break;
            case 8: sum = scores16<8>(qj, kr); break;
            default: {
              vf16 s[16];
              for (int t = 0; t < 16; ++t) s[t] = vf16{};
              for (int64_t i = 0; i < NV; ++i) {
                const vf16 qi = load16(qj + 16 * i);
                for (int t = 0; t < 16; ++t) s[t] += qi * load16(kr[t] + 16 * i);
              }
              sum = lane_sums16(s);
            }
          }
          const vf16 v = round_as16<T>(sum) * scale;  // a whole vector: Lpad is a multiple of 16
          std::memcpy(sc + ((g * R + r) * G + jj) * Lpad + t0, &v, sizeof(v));
        }
      }
    }
  }
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
    O* og = R == 1 ? o + g * G * D : ot + g * RG * D;
    for (int64_t j0 = 0; j0 < RG; j0 += 4)
      for (int64_t c = 0; c < NV;) {
        const int64_t gb = std::min<int64_t>(4, RG - j0), at = off + g * D + 16 * c;
        if (NV - c >= 4) {
          weighted16_heads<4>(gb, pool, slots, L, at, pg + j0 * Lpad, Lpad, og + j0 * D + 16 * c, D);
          c += 4;
        } else {
          weighted16_heads<1>(gb, pool, slots, L, at, pg + j0 * Lpad, Lpad, og + j0 * D + 16 * c, D);
          c += 1;
        }
      }
  }
  if (R > 1)
    for (int64_t g = 0; g < per; ++g)
      for (int64_t r = 0; r < R; ++r)
        std::memcpy(o + r * ostride + g * G * D, ot + (g * R + r) * G * D, G * D * sizeof(O));
}

}  // namespace
