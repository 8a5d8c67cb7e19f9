// Kernel family avx512_vnni (AVX-512F/BW/VL/DQ + VNNI): the int8 dot products of int8_linear.h
// by vpdpbusd (u8 x s8 summed four at a time into int32, no saturation). 256-bit registers
// (AVX512VL): on CPUs that split 512-bit operations in two (Zen 4) a wider register buys no
// throughput, and every other loop of the library stays on the 8-float vectors it was written for;
// AVX-512 gives 32 of them, so more rows of x share each unpacked weight block.
#pragma once
#if !defined(__AVX512VNNI__) || !defined(__AVX512VL__) || !defined(__AVX2__) || !defined(__FMA__)
#error "the avx512_vnni family needs -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

namespace isa {
#if defined(SGLANG_ISA_AMX)
constexpr const char* kFamily = "amx";  // this library, built for the amx family (its AMX tiles are oneDNN's)
#else
constexpr const char* kFamily = "avx512_vnni";
#endif
constexpr int kMaxRows = 8;
// the wide shape of int8_linear.h / int16_linear.h: 32 registers hold a block's 8 unpacked vectors beside
// the rows' chains (see isa_avx2.h for the lean one)
constexpr bool kLeanRows = false;

// see isa_avx2.h: the same values, two independent chains of four vpdpbusd
inline __m256i dot_q4_block(const __m256i* w, const __m256i* x4) {
  __m256i a = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w[0], x4[0]);
  __m256i b = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w[1], x4[1]);
  for (int i = 2; i < 8; i += 2) {
    a = _mm256_dpbusd_epi32(a, w[i], x4[i]);
    b = _mm256_dpbusd_epi32(b, w[i + 1], x4[i + 1]);
  }
  return _mm256_add_epi32(a, b);
}

// Q8_0 with its weights offset to unsigned (kQ8Offset: w + 128, a byte's sign bit flipped once per unpacked block):
// sum (w + 128) x, which the caller turns into sum w x by subtracting 128 sum x (exact in int32). Per row of x that
// is one vpdpbusd a vector, where |w| against sign(x, w) took a vpsignb more for every row
constexpr bool kQ8Offset = true;
inline __m256i dot_q8_block(const __m256i* wu, const __m256i* x4) { return dot_q4_block(wu, x4); }

// int16 pairs multiplied and summed into acc in one instruction (vpdpwssd; see isa_avx2.h)
inline __m256i dot_i16(__m256i acc, __m256i w, __m256i x) { return _mm256_dpwssd_epi32(acc, w, x); }
}  // namespace isa
