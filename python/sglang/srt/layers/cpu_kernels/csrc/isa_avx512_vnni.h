// Kernel family avx512_vnni (AVX-512F/BW/VL/DQ + VNNI): the int8 dot product of
// 32 bytes in one vpdpbusd. 256-bit registers (AVX512VL): a Q4 block is 32
// weights, and on CPUs that split 512-bit operations in two (Zen 4) a wider
// register buys no throughput; it also keeps every other loop of the library
// on the 8-float vectors it was written for.
#pragma once
#if !defined(__AVX512VNNI__) || !defined(__AVX512VL__) || !defined(__AVX2__) || !defined(__FMA__)
#error "the avx512_vnni family needs -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

namespace isa {
constexpr const char* kFamily = "avx512_vnni";

// lane j (of 8 int32) = sum over i < 4 of u[4j + i] * s[4j + i], u unsigned, s signed;
// vpdpbusd sums in int32 without saturation: the same values as the avx2 family's
inline __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
}  // namespace isa
