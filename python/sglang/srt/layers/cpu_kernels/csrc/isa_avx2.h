// Kernel family avx2 (AVX2 + FMA + F16C): the int8 dot products of int8_linear.h.
#pragma once
#if !defined(__AVX2__) || !defined(__FMA__)
#error "the avx2 family needs -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

namespace isa {
constexpr const char* kFamily = "avx2";
// rows of x register-blocked per unpacked weight block: 16 ymm registers hold the 8 unpacked
// weight vectors and two accumulators per row of x
constexpr int kMaxRows = 4;

// Q4, 8 interleaved output rows: lane j of the result = sum over the block's 32 weights of
// row j's nibble (unsigned, w[2g] low half, w[2g + 1] high half) times x (signed int8, |x| <= 127),
// x4[2g + h] the 4 bytes of x that vector 2g + h multiplies, broadcast. vpmaddubsw adds pairs into
// int16 (|15 * 127 * 2| = 3810), eight of them still fit (30480 < 32767), so one vpmaddwd widens all.
inline __m256i dot_q4_block(const __m256i* w, const __m256i* x4) {
  __m256i s = _mm256_maddubs_epi16(w[0], x4[0]);
  for (int i = 1; i < 8; ++i) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w[i], x4[i]));
  return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

// Q8_0, 8 interleaved rows: |w| against sign(x, w) (a pair is at most 2 * 128 * 127 = 32512, so each
// vpmaddubsw is widened by its own vpmaddwd before the next is added)
inline __m256i dot_q8_block(const __m256i* w, const __m256i* x4) {
  const __m256i one = _mm256_set1_epi16(1);
  __m256i acc = _mm256_setzero_si256();
  for (int i = 0; i < 8; ++i)
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w[i], w[i]), _mm256_sign_epi8(x4[i], w[i])), one));
  return acc;
}

// int16 pairs (one row per 32-bit lane, int16_linear.h) multiplied and summed into acc; |w| <= 128 and
// |x| <= 32767, so a pair's sum fits int32 with room for every block of 32
inline __m256i dot_i16(__m256i acc, __m256i w, __m256i x) { return _mm256_add_epi32(acc, _mm256_madd_epi16(w, x)); }
}  // namespace isa
