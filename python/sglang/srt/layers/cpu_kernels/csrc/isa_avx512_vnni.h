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

#include <cstdint>

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

// acc + w (unsigned bytes) x the 4 signed bytes at x in every 32-bit lane, read by the instruction's own broadcast
// ({1to8}). GCC issues _mm256_set1_epi32 of a load as a vpbroadcastd of its own before each vpdpbusd; the folded
// load took q4_linear_i8 from 2.10-2.20 to 1.86-1.94 ns a block of 8 outputs a row at 8-64 rows, 2.17 to 2.02 at 4
// (Zen 4 EPYC, one thread, in cache: bench/int_products.py)
// (the operand names the 4 bytes the instruction reads, typed so that they alias the activations' stores)
typedef int32_t any32 __attribute__((may_alias));
inline __m256i dpbusd_at(__m256i acc, __m256i w, const int8_t* x) {
  __asm__("vpdpbusd %2%{1to8%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const any32*>(x)));
  return acc;
}

// see isa_avx2.h: the same values (exact int32 sums), two independent chains of four vpdpbusd
inline __m256i dot_q4_block(const __m256i* w, const int8_t* x) {
  __m256i a = dpbusd_at(_mm256_setzero_si256(), w[0], x);
  __m256i b = dpbusd_at(_mm256_setzero_si256(), w[1], x + 4);
  for (int i = 2; i < 8; i += 2) {
    a = dpbusd_at(a, w[i], x + 4 * i);
    b = dpbusd_at(b, w[i + 1], x + 4 * i + 4);
  }
  return _mm256_add_epi32(a, b);
}

// Q8_0 with its weights offset to unsigned (kQ8Offset: w + 128, a byte's sign bit flipped once per unpacked block):
// sum (w + 128) x, which the caller turns into sum w x by subtracting 128 sum x (exact in int32). Per row of x that
// is one vpdpbusd a vector, where |w| against sign(x, w) took a vpsignb more for every row
constexpr bool kQ8Offset = true;
inline __m256i dot_q8_block(const __m256i* wu, const int8_t* x) { return dot_q4_block(wu, x); }

// int16 pairs multiplied and summed into acc in one instruction (vpdpwssd; see isa_avx2.h), the pair at x read by
// the instruction's own broadcast as dpbusd_at reads its bytes (q4_linear_i16 at 1 / 2 / 4 rows 1.10x / 1.07x / 1.02x;
// int16_zmm.h's 512-bit pass keeps its vpbroadcastd: the folded {1to16} read 1-2% slower there)
inline __m256i dot_i16(__m256i acc, __m256i w, const int16_t* x) {
  __asm__("vpdpwssd %2%{1to8%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const any32*>(x)));
  return acc;
}
}  // namespace isa
