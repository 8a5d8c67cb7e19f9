// The 16-float form of decode_attention.h's loops (Lanes16): where AVX-512 gives 32 registers of 16 floats,
// a score block takes 16 tokens and a weighted pass 4 query heads x 4 registers, the whole of a 64-element
// head, in one pass over V. Included by decode_attention.h where __AVX512F__ is defined.
// On the AMX Xeon (2 threads, 64 requests of 101 bfloat16 tokens, 30 layers) 5.8 ms against the 8-float form's 7.8
// with K/V in L1, 11.2 against 13.5 with each request's slots in one run, 16.2 against 20.2 with pages of 1
// interleaved: the rest is the reads of K/V.
#pragma once
#include <cstdint>
#include <cstring>

#include "vec.h"

namespace {

typedef float vf16 __attribute__((vector_size(64)));

struct Lanes16 {
  typedef vf16 V;
  static constexpr int W = 16;

  static V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  }
  static V load(const c10::BFloat16* p) {
    return (V)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
  }

  // 16 vectors -> one vector whose lane i is the sum of a[i]'s lanes (4 levels of shuffles and adds; a is scratch)
  static V lane_sums(V* a) {
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

  // vectors of a head the next weighted pass takes: 4 (a 64-element chunk) while the head has them, else 1
  static int chunk(int64_t, int64_t left) { return left >= 4 ? 4 : 1; }
};

}  // namespace
