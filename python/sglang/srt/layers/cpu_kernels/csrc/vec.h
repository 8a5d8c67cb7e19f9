// Vector helpers shared by the CPU kernels: 8-float vectors (one AVX2 register),
// bfloat16 as raw bits, widening loads, transposing lane sums. Included by
// decode_step.cpp and the integer kernels' headers (one translation unit per kernel family, see isa.py).
#pragma once
#include <torch/extension.h>

#include <cstdint>
#include <cstring>
#include <immintrin.h>

namespace {

template <typename T>
inline T round_to(float x) { return static_cast<T>(x); }

// element i as float; bfloat16 read as raw bits so that loops over it vectorize
inline float load_f(const float* __restrict p, int64_t i) { return p[i]; }
inline float load_f(const c10::BFloat16* __restrict p, int64_t i) {
  const uint32_t bits = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(p)[i]) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// 8 floats: one AVX2 register. GCC lowers wider vector types on an AVX2-only
// CPU through the stack (see vi8 below), so every loop here works 8 at a time.
typedef float vf8 __attribute__((vector_size(32)));

// x rounded to the nearest T and back, written so that loops over it
// vectorize (round to nearest even, as c10::BFloat16's constructor; NaN kept)
template <typename T>
inline float round_as(float x) { return x; }
template <>
inline float round_as<c10::BFloat16>(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  float y;
  std::memcpy(&y, &r, 4);
  return x != x ? x : y;
}

// every cache line of [p, p + bytes) toward L1 (kLocality 3: prefetcht0), or toward the outer caches
// (1: prefetcht2), which keep more misses in flight than L1 has room for
template <int kLocality = 3>
inline void prefetch(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t i = 0; i < bytes; i += 64) __builtin_prefetch(c + i, 0, kLocality);
}
// How far ahead of the weight block it is multiplying an integer product asks for the weights (bytes; 0: not
// at all), in passes over the weights that serve at most g_weight_prefetch_rows rows of x; set for this library
// (one per kernel family) between calls, never while kernels run (set_weight_prefetch, from isa.weight_prefetch):
// on a core whose one-row products are compute-bound (Zen 1) the hardware prefetcher alone leaves the DRAM reads
// and the arithmetic mostly unoverlapped; where the bandwidth binds (Zen 2) the extra instructions bought nothing;
// on the AMX Xeon it pays at 1-8 rows.
inline int64_t g_weight_prefetch = 0;
inline int g_weight_prefetch_rows = 1;

// the cache lines of the kBytes-byte weight block g_weight_prefetch bytes past p, for a pass of M rows of x
template <int M, int64_t kBytes>
inline void prefetch_weights(const uint8_t* p) {
  // the address by integer arithmetic: past the weight's end it is no pointer into it (a prefetch never faults)
  if (g_weight_prefetch > 0 && M <= g_weight_prefetch_rows)
    prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + g_weight_prefetch), kBytes);
}

// The packed float32 products below work on 8 floats at a time: one AVX2
// register. GCC 12 lowers 64-byte vector code on an AVX2-only CPU through the
// stack (splats as 16 scalar stores, accumulators moved via general
// registers): measured 5-7x slower than this width for the whole product.
typedef int32_t vi8 __attribute__((vector_size(32)));
typedef uint8_t vu8x8 __attribute__((vector_size(8)));
typedef int8_t vi8x8 __attribute__((vector_size(8)));

// 8 bytes at p -> 8 int32 (zero- or sign-extended: vpmovzxbd / vpmovsxbd)
inline vi8 widen_u8(const uint8_t* p) {
#if defined(__AVX2__)
  return (vi8)_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
#else
  vu8x8 v;
  std::memcpy(&v, p, sizeof(v));
  return __builtin_convertvector(v, vi8);
#endif
}
inline vi8 widen_i8(const int8_t* p) {
#if defined(__AVX2__)
  return (vi8)_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
#else
  vi8x8 v;
  std::memcpy(&v, p, sizeof(v));
  return __builtin_convertvector(v, vi8);
#endif
}
inline vf8 to_f(vi8 v) { return __builtin_convertvector(v, vf8); }
inline vf8 load8(const float* p) {
  vf8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline vf8 load8(const c10::BFloat16* p) {
  typedef uint16_t vu16x8 __attribute__((vector_size(16)));
  typedef uint32_t vu32x8 __attribute__((vector_size(32)));
  vu16x8 raw;
  std::memcpy(&raw, p, sizeof(raw));
  const vu32x8 bits = __builtin_convertvector(raw, vu32x8) << 16;
  vf8 v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}
// 8 vectors -> one vector whose lane i is the sum of a[i]'s lanes (3 levels of shuffles and adds)
inline vf8 lane_sums8(const vf8* a) {
  vf8 x[4], y[2];
  for (int i = 0; i < 4; ++i)
    x[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 8, 2, 10, 4, 12, 6, 14) +
           __builtin_shufflevector(a[2 * i], a[2 * i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
  for (int i = 0; i < 2; ++i)
    y[i] = __builtin_shufflevector(x[2 * i], x[2 * i + 1], 0, 1, 8, 9, 4, 5, 12, 13) +
           __builtin_shufflevector(x[2 * i], x[2 * i + 1], 2, 3, 10, 11, 6, 7, 14, 15);
  return __builtin_shufflevector(y[0], y[1], 0, 1, 2, 3, 8, 9, 10, 11) + __builtin_shufflevector(y[0], y[1], 4, 5, 6, 7, 12, 13, 14, 15);
}
inline float hsum8(vf8 v) {
  float s = 0.f;
  for (int i = 0; i < 8; ++i) s += v[i];
  return s;
}

}  // namespace
