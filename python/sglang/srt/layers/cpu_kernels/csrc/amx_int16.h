// The int16 arithmetic's products on AMX tiles (the amx family's library only): the same integer sums as
// int16_linear.h's vpdpwssd loops, so the same bits, with the tiles doing the multiply-adds.
//
// AMX has no int16 dot product, so each int16 activation is split into two signed bytes,
// x = 256 hi + lo + 128 (hi = x >> 8, lo = (x & 255) - 128), and a block's sum of 32 products is
//   sum(x w) = 256 sum(hi w) + sum(lo w) + 128 sum(w)
// with both byte sums from one tile product: A holds a chunk's R rows of lo bytes and then its R rows of hi
// bytes (2R <= 16 tile rows), B one block (K 32) of 16 output rows, two 8-row groups of int8_linear.h's layout
// side by side (8 rows of 64 bytes: row i is every output's weights 4i..4i+3, as the groups hold them lane by
// lane), so C [2R, 16] int32 = the lo sums, then the hi sums; sum(w) per output comes from the unpacked B rows
// (vpdpbusd against ones). Q4 nibbles are unsigned (tdpbsud), Q8_0 bytes signed (tdpbssd).
// Each block's sums are scaled in float32 by the block's weight and activation scales, in the order
// i16_group scales its vectors (scale_into, store_rows) lane by lane, so every output equals the AVX-512
// kernel's bit for bit (tests/integration/test_integer_kernels.py). The blocks run as a 3-stage pipeline on two
// sets of tiles: block b's product, block b - 1's sums stored, block b - 2's scaling. On one thread of the AMX
// Xeon a block of 16 outputs takes ~54 ns at 2 rows and ~84 at 8, ~27 of them the tiles' own loads, product and
// store whatever the rows (three separate passes, or the stages further apart, measured no faster), so the tiles
// paid from 3 rows of x on; now that the vector kernels prefetch their weights and 5-8 rows take one 512-bit pass
// (int16_zmm.h) they serve 9 rows or more (kMinRows), in chunks of up to 8. Tiles need the process's permission
// (arch_prctl ARCH_REQ_XCOMP_PERM, asked once: enabled()); without it quant_groups keeps the vector kernels.
// Included by quant_linear.h when built with -DSGLANG_ISA_AMX.
#pragma once
#if defined(SGLANG_ISA_AMX)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "int16_zmm.h"

namespace {
namespace amx {

constexpr int kMaxRows = 8;  // rows of x a chunk: their lo and hi bytes fill a tile's 16 rows
// the fewest rows of x the tiles serve: below, the vector kernels (on the AMX Xeon a fused step of 2 / 4 / 8 rows
// on int16: 7.1 / 13.3 / 18.1 ms on the vector kernels, 7.6 / 9.7 / 13.2 on tiles; bench/decode_step.py; with the
// weights prefetched 3 / 4 rows 6.4 / 6.3 ms on the vector kernels, 7.9 / 7.7 on tiles, and 5-8 rows as fast or
// faster in int16_zmm.h's one pass: bench/kernel_ab.py, the one source with each kMinRows)
constexpr int kMinRows = 9;

// whether this process may use the tile registers (asked of the kernel once; Linux 5.16+)
inline bool enabled() {
  static const bool ok = [] {
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// tiles 0/1: A of the even / odd blocks (2R x 32 bytes), 2/3: their B (8 x 64), 4/5: their C (2R x 16 int32).
// Loaded on the calling thread before every call's products (oneDNN loads its own for its tiles).
inline void configure(int R) {
  TileConfig c;
  for (int t : {0, 1}) c.rows[t] = static_cast<uint8_t>(2 * R), c.colsb[t] = 32;
  for (int t : {2, 3}) c.rows[t] = 8, c.colsb[t] = 64;
  for (int t : {4, 5}) c.rows[t] = static_cast<uint8_t>(2 * R), c.colsb[t] = 64;
  _tile_loadconfig(&c);
}

// B of one block for groups g and g + 1 (16 outputs: wa, wb) into out [8][64], and 128 sum(w) per output into *w128
template <typename F>
inline void unpack_pair(const uint8_t* wa, const uint8_t* wb, uint8_t* out, int32_t* w128) {
  __m512i sum = _mm512_setzero_si512();
  auto pair = [&](int v) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wa + 32 * v))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 32 * v)), 1);
  };
  if constexpr (F::kMin) {  // Q4: packed vector v holds rows 2v (low nibbles) and 2v + 1 (high), unsigned
    const __m512i mask = _mm512_set1_epi8(15), ones = _mm512_set1_epi8(1);
    for (int v = 0; v < 4; ++v) {
      const __m512i p = pair(v), lo = _mm512_and_si512(p, mask), hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), mask);
      _mm512_store_si512(out + 128 * v, lo);
      _mm512_store_si512(out + 128 * v + 64, hi);
      sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(sum, lo, ones), hi, ones);
    }
  } else {  // Q8_0: vector i is row i, signed
    const __m512i ones = _mm512_set1_epi8(1);
    for (int i = 0; i < 8; ++i) {
      const __m512i r = pair(i);
      _mm512_store_si512(out + 64 * i, r);
      sum = _mm512_dpbusd_epi32(sum, ones, r);
    }
  }
  _mm512_store_si512(w128, _mm512_slli_epi32(sum, 7));
}

using zmm16::load_f16x16;  // 16 float16 values: 8 at a, 8 at b

// Per-thread scratch, reused across calls (each thread splits the rows of x for its own share of the outputs:
// M x K bytes, a few hundred instructions against the products' thousands)
struct Scratch {
  std::vector<uint8_t> a;  // a chunk's A rows for every block: [2R][K] (lo rows, then hi rows)
  alignas(64) uint8_t b[2][512];
  alignas(64) int32_t c[2][2 * kMaxRows * 16];
  alignas(64) int32_t w128[4][16];
};

// R rows of x (xq [R, K] int16) -> A rows [2R][K]: lo bytes, then hi bytes
inline void split_rows(const int16_t* xq, int R, int64_t K, uint8_t* a) {
  const __m512i low = _mm512_set1_epi16(255), off = _mm512_set1_epi16(128);
  for (int m = 0; m < R; ++m)
    for (int64_t k = 0; k < K; k += 32) {
      const __m512i v = _mm512_loadu_si512(xq + m * K + k);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + m * K + k), _mm512_cvtepi16_epi8(_mm512_sub_epi16(_mm512_and_si512(v, low), off)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + (R + m) * K + k), _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
    }
}

// tile product of set S: C = A x B (the tile intrinsics take literal tile numbers)
template <typename F, int S>
inline void product() {
  if constexpr (S == 0) {
    if constexpr (F::kMin) _tile_dpbsud(4, 0, 2);
    else _tile_dpbssd(4, 0, 2);
  } else {
    if constexpr (F::kMin) _tile_dpbsud(5, 1, 3);
    else _tile_dpbssd(5, 1, 3);
  }
}

// y[m, n0 .. n0 + 16) for R rows of x (chunk rows m of xd/xs at m * nb): the pipelined blocks of one output pair
template <int R, typename F>
void pair_rows(const uint8_t* wa, const uint8_t* wb, const uint16_t* sa, const uint16_t* sb, const uint8_t* a, const float* xd,
               const float* xs, float* y, int64_t K, int64_t N, int64_t n0, Scratch& s) {
  const int64_t nb = K / 32, sstride = F::kMin ? 16 : 8;
  __m512 acc[R], macc[R];
  for (int m = 0; m < R; ++m) acc[m] = macc[m] = _mm512_setzero_ps();
  unpack_pair<F>(wa, wb, s.b[0], s.w128[0]);
  for (int64_t b = 0; b < nb + 2; ++b) {
    if (b < nb) {  // stage 1: block b's product on tile set b & 1 (its B unpacked an iteration ago)
      if (b & 1) {
        _tile_loadd(1, a + 32 * b, K);
        _tile_loadd(3, s.b[1], 64);
        _tile_zero(5);
        product<F, 1>();
      } else {
        _tile_loadd(0, a + 32 * b, K);
        _tile_loadd(2, s.b[0], 64);
        _tile_zero(4);
        product<F, 0>();
      }
      if (b + 1 < nb) {
        prefetch_weights<R, F::kBytes>(wa + (b + 1) * F::kBytes);
        prefetch_weights<R, F::kBytes>(wb + (b + 1) * F::kBytes);
        unpack_pair<F>(wa + (b + 1) * F::kBytes, wb + (b + 1) * F::kBytes, s.b[(b + 1) & 1], s.w128[(b + 1) & 3]);
      }
    }
    if (b >= 1 && b <= nb) {  // stage 2: block b - 1's sums to memory
      if ((b - 1) & 1) _tile_stored(5, s.c[1], 64);
      else _tile_stored(4, s.c[0], 64);
    }
    if (b >= 2) {  // stage 3: block b - 2 scaled into the accumulators, as scale_into adds it
      const int64_t blk = b - 2;
      const int32_t* c = s.c[blk & 1];
      const __m512i w128 = _mm512_load_si512(s.w128[blk & 3]);
      const __m512 dw = load_f16x16(sa + blk * sstride, sb + blk * sstride);
      __m512 mn = _mm512_setzero_ps();
      if constexpr (F::kMin) mn = load_f16x16(sa + blk * sstride + 8, sb + blk * sstride + 8);
      for (int m = 0; m < R; ++m) {
        const __m512i dot = _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c + 16 * (R + m)), 8),
                                                              _mm512_load_si512(c + 16 * m)), w128);
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, _mm512_set1_ps(xd[m * nb + blk])), acc[m]);
        if constexpr (F::kMin) macc[m] = _mm512_fmadd_ps(mn, _mm512_set1_ps(xs[m * nb + blk]), macc[m]);
      }
    }
  }
  for (int m = 0; m < R; ++m) _mm512_storeu_ps(y + m * N + n0, F::kMin ? _mm512_add_ps(acc[m], macc[m]) : acc[m]);
}

template <typename F>
void pair_rows_r(int R, const uint8_t* wa, const uint8_t* wb, const uint16_t* sa, const uint16_t* sb, const uint8_t* a, const float* xd,
                 const float* xs, float* y, int64_t K, int64_t N, int64_t n0, Scratch& s) {
  switch (R) {
#define SGLANG_AMX_ROWS(r) \
  case r: pair_rows<r, F>(wa, wb, sa, sb, a, xd, xs, y, K, N, n0, s); break;
    SGLANG_AMX_ROWS(1) SGLANG_AMX_ROWS(2) SGLANG_AMX_ROWS(3) SGLANG_AMX_ROWS(4)
    SGLANG_AMX_ROWS(5) SGLANG_AMX_ROWS(6) SGLANG_AMX_ROWS(7) SGLANG_AMX_ROWS(8)
#undef SGLANG_AMX_ROWS
  }
}

// y[:, 8 g0 .. ) for the pairs of whole groups from g0 on (groups of 8 outputs, see int8_linear.h) for M rows of int16 x
// (xq [M, K], xd/xs [M, K / 32]) in balanced chunks of at most kMaxRows; returns the first group left to the vector
// kernels (a last odd or partial one)
template <typename F>
int64_t i16_pairs(const uint8_t* wp, const uint16_t* sp, const int16_t* xq, const float* xd, const float* xs, float* y, int64_t M, int64_t K,
                  int64_t N, int64_t g0, int64_t g1) {
  const int64_t pairs = std::max<int64_t>(0, (std::min(g1, N / 8) - g0) / 2);
  if (pairs == 0) return g0;
  const int64_t nb = K / 32, sstride = F::kMin ? 16 : 8, chunks = (M + kMaxRows - 1) / kMaxRows;
  thread_local Scratch s;
  int configured = 0;
  for (int64_t ch = 0, m0 = 0; ch < chunks; ++ch) {
    const int64_t m1 = M * (ch + 1) / chunks;
    const int R = static_cast<int>(m1 - m0);
    s.a.resize(2 * R * K);
    split_rows(xq + m0 * K, R, K, s.a.data());
    if (R != configured) configure(configured = R);
    for (int64_t p = 0; p < pairs; ++p) {
      const int64_t g = g0 + 2 * p;
      pair_rows_r<F>(R, wp + g * nb * F::kBytes, wp + (g + 1) * nb * F::kBytes, sp + g * nb * sstride, sp + (g + 1) * nb * sstride, s.a.data(),
                     xd + m0 * nb, xs + m0 * nb, y + m0 * N, K, N, 8 * g, s);
    }
    m0 = m1;
  }
  _tile_release();
  return g0 + 2 * pairs;
}

}  // namespace amx
}  // namespace
#endif
