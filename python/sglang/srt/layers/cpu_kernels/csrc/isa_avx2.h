// Kernel family avx2 (AVX2 + FMA + F16C): the int8 dot product of 32 bytes.
#pragma once
#if !defined(__AVX2__) || !defined(__FMA__)
#error "the avx2 family needs -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

namespace isa {
constexpr const char* kFamily = "avx2";

// lane j (of 8 int32) = sum over i < 4 of u[4j + i] * s[4j + i], u unsigned, s signed.
// vpmaddubsw adds pairs into int16 with saturation: exact while |u0*s0 + u1*s1| <= 32767,
// which holds for the operands here (Q4 nibbles <= 15, |int8| <= 128 against |s| <= 127).
inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
}  // namespace isa
