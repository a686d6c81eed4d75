#pragma once
// AVX2 helpers shared by the per-family row kernels (kernels/simd_avx2_*.cc). Every function
// carries a target attribute instead of a global -mavx2, so the library still runs on CPUs
// without AVX2: the public entry points (simd_avx2.cc) check cpu_features() before calling in.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/float_convert.h"
#include "kernels/exp_poly.h"

#define KVGATE_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KVGATE_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline
#define KVGATE_AVX2_LAMBDA __attribute__((target("avx2,fma,f16c"), always_inline))

namespace kvgate::kernels::simd::avx2 {

inline float load_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, sizeof f);
  return f;
}
inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return f16_to_f32(h);
}
inline void store_f32(uint8_t* p, float f) { std::memcpy(p, &f, sizeof f); }
inline void store_f16(uint8_t* p, float f) {
  const uint16_t h = f32_to_f16(f);
  std::memcpy(p, &h, sizeof h);
}

KVGATE_AVX2_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// hsum of four vectors at once, in hsum's order per vector: ((v0 + v4) + (v2 + v6)) + ((v1 + v5) +
// (v3 + v7)), so each lane holds exactly hsum(a_j).
KVGATE_AVX2_INLINE __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  __m128 x0 = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
  __m128 x1 = _mm_add_ps(_mm256_castps256_ps128(a1), _mm256_extractf128_ps(a1, 1));
  __m128 x2 = _mm_add_ps(_mm256_castps256_ps128(a2), _mm256_extractf128_ps(a2, 1));
  __m128 x3 = _mm_add_ps(_mm256_castps256_ps128(a3), _mm256_extractf128_ps(a3, 1));
  _MM_TRANSPOSE4_PS(x0, x1, x2, x3);  // x_k now holds element k of each a_j
  return _mm_add_ps(_mm_add_ps(x0, x2), _mm_add_ps(x1, x3));
}
KVGATE_AVX2_INLINE float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
KVGATE_AVX2_INLINE float hmin(__m256 v) {
  __m128 s = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_min_ps(s, _mm_movehl_ps(s, s));
  s = _mm_min_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
KVGATE_AVX2_INLINE __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
// max |x| over n (multiple of 8) floats; a NaN element is skipped, as std::max(acc, |x|) does.
KVGATE_AVX2_INLINE float abs_max(const float* x, int n) {
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(abs_ps(_mm256_loadu_ps(x + i)), m);
  return hmax(m);
}
KVGATE_AVX2_INLINE __m256 cvt_i8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
KVGATE_AVX2_INLINE __m256 cvt_u8x8(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }
// 8 int32 lanes holding values that fit a byte -> 8 bytes at dst.
KVGATE_AVX2_INLINE void store_i32x8_as_i8(__m256i v, uint8_t* dst) {
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packs_epi16(w, w));
}
KVGATE_AVX2_INLINE void store_u32x8_as_u8(__m256i v, uint8_t* dst) {
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(w, w));
}
// Four vectors of 8 int32 (elements 0..31 in order) -> 32 signed bytes in order.
KVGATE_AVX2_INLINE __m256i pack_i32x32_to_i8(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
  const __m256i p01 = _mm256_packs_epi32(c0, c1);  // lanes: 0-3 8-11 | 4-7 12-15
  const __m256i p23 = _mm256_packs_epi32(c2, c3);
  const __m256i b = _mm256_packs_epi16(p01, p23);  // dwords: 0-3 8-11 16-19 24-27 | 4-7 12-15 20-23 28-31
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

constexpr float pow2(int e) {
  float r = 1.0f;
  for (int i = 0; i < e; ++i) r *= 2.0f;
  return r;
}

// 16 signed bytes (elements in order) -> two vectors of 8 floats.
KVGATE_AVX2_INLINE void cvt_i8x16(__m128i bytes, __m256* v) {
  v[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
  v[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(bytes, 8)));
}

KVGATE_AVX2_INLINE float load_f16_hw(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

// Low nibbles hold elements 0..15 and high nibbles 16..31 (ggml's q4 layout).
KVGATE_AVX2_INLINE void nibbles_to_u8x32(const uint8_t* qs, __m128i* lo, __m128i* hi) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0f);
  *lo = _mm_and_si128(bytes, mask);
  *hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
}

// The same 32 codes as nibbles_to_u8x32, as 32-bit lanes in element order: c[0] = elements 0..7
// ... c[3] = 24..31. Each 8 bytes are widened once, with the load folded into the widening, and
// give 8 low and 8 high nibbles; splitting in bytes first needs four widenings and two byte
// shifts per block, all on the one shuffle port the widening uses.
KVGATE_AVX2_INLINE void nibbles_to_i32x32(const uint8_t* qs, __m256i* c) {
  const __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs)));
  const __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8)));
  const __m256i mask = _mm256_set1_epi32(0x0f);
  c[0] = _mm256_and_si256(b0, mask);
  c[1] = _mm256_and_si256(b1, mask);
  c[2] = _mm256_srli_epi32(b0, 4);
  c[3] = _mm256_srli_epi32(b1, 4);
}

// Nibbles 0..7 of the little-endian u32 at p (element 2i in byte i's low nibble, 2i+1 in its high
// one) as 32-bit lanes in order, without the shuffle port: the broadcast is a plain load and
// each lane shifts its own nibble down.
KVGATE_AVX2_INLINE __m256i nibbles8_to_i32(const uint8_t* p) {
  const __m256i all = _mm256_castps_si256(_mm256_broadcast_ss(reinterpret_cast<const float*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi32(all, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)), _mm256_set1_epi32(0x0f));
}

// roundf (half away from zero) exactly: truncate, then step away from zero when the dropped
// fraction is at least one half. x - trunc(x) is exact for |x| < 2^23.
KVGATE_AVX2_INLINE __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = abs_ps(_mm256_sub_ps(v, t));
  const __m256 away = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f));
  return _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), away));
}

// exp_poly (kernels/exp_poly.h) on 8 lanes, the same operations in the same order.
KVGATE_AVX2_INLINE __m256 exp_ps(__m256 x) {
  const __m256 shifter = _mm256_set1_ps(kExpPolyShifter), one = _mm256_set1_ps(1.0f);
  x = _mm256_max_ps(_mm256_set1_ps(kExpPolyMin), x);
  x = _mm256_min_ps(_mm256_set1_ps(kExpPolyMax), x);
  const __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(kExpPolyLog2e), shifter);
  const __m256 n = _mm256_sub_ps(t, shifter);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kExpPolyLn2Hi), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kExpPolyLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpPolyP[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPolyP[i]));
  p = _mm256_fmadd_ps(p, r, one);
  p = _mm256_fmadd_ps(p, r, one);
  const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(shifter));
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

}  // namespace kvgate::kernels::simd::avx2
