// Kernel family avx2 (AVX2 + FMA + F16C): the int8 dot products of int8_linear.h.
#pragma once
#if !defined(__AVX2__) || !defined(__FMA__)
#error "the avx2 family needs -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

namespace isa {
constexpr const char* kFamily = "avx2";
// rows of x one weight block serves (int8 and int16 activations alike). With 16 ymm registers the
// kernels take the lean shape (kLeanRows): each weight vector is unpacked and used by every row before
// the next, a row keeps one integer chain and one float accumulator while the blocks stream, and the Q4
// mins' term follows in a short second pass (the same bits as the wide shape, row by row); the wide shape
// (8 unpacked vectors, two chains a row) spilled past 4 rows. Some spills remain at 8 rows (the float
// accumulators, a few chains); the timings decide: q4_linear_i8 on gate_up, one thread, in cache, took
// 4.6-4.7 ns a block of 8 outputs a row at 4-64 rows in the wide shape and 3.8-3.9 at 8-64 in the lean
// one, int16 8.1-8.3 against 6.3-6.4 (AVX2-only EPYC, family 23 model 49; one row: the same).
// dot_q4_block, dot_q8_block and dot_i16 below are the wide shape's: kept for the shared kernels to compile.
// They take the activations where they lie (x: a block's 32 int8 values, or an int16 pair), as the AVX-512 family's
// instructions read them by their own broadcast.
constexpr int kMaxRows = 8;
constexpr bool kLeanRows = true;

// the 4 bytes at p in every 32-bit lane
inline __m256i at4(const void* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Q4, 8 interleaved output rows: lane j of the result = sum over the block's 32 weights of
// row j's nibble (unsigned, w[2g] low half, w[2g + 1] high half) times x (signed int8, |x| <= 127),
// vector i multiplying x[4i .. 4i + 4), broadcast. vpmaddubsw adds pairs into
// int16 (|15 * 127 * 2| = 3810), eight of them still fit (30480 < 32767), so one vpmaddwd widens all.
inline __m256i dot_q4_block(const __m256i* w, const int8_t* x) {
  __m256i s = _mm256_maddubs_epi16(w[0], at4(x));
  for (int i = 1; i < 8; ++i) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w[i], at4(x + 4 * i)));
  return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

// Q8_0 weights as stored, signed (vpmaddubsw's int16 pairs would saturate on w + 128: avx512_vnni's kQ8Offset)
constexpr bool kQ8Offset = false;

// Q8_0, 8 interleaved rows: |w| against sign(x, w) (a pair is at most 2 * 128 * 127 = 32512, so each
// vpmaddubsw is widened by its own vpmaddwd before the next is added)
inline __m256i dot_q8_block(const __m256i* w, const int8_t* x) {
  const __m256i one = _mm256_set1_epi16(1);
  __m256i acc = _mm256_setzero_si256();
  for (int i = 0; i < 8; ++i)
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w[i], w[i]), _mm256_sign_epi8(at4(x + 4 * i), w[i])), one));
  return acc;
}

// int16 pairs (one row per 32-bit lane, int16_linear.h) multiplied and summed into acc; |w| <= 128 and
// |x| <= 32767, so a pair's sum fits int32 with room for every block of 32
inline __m256i dot_i16(__m256i acc, __m256i w, const int16_t* x) { return _mm256_add_epi32(acc, _mm256_madd_epi16(w, at4(x))); }
}  // namespace isa
