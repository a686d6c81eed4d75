// AVX2 kernels. Each function carries a target attribute instead of a global -mavx2, so the
// library still runs on CPUs without AVX2: the public entry points check cpu_features() first.
//
// Decoders turn one block of stored bytes into 8-float vectors in "row units" (the value before
// the per-row or per-tensor scale); the generic drivers below tile 4 rows at a time so each
// query chunk is loaded once per 4 keys and 4 independent FMA chains hide the latency.
#include "kernels/simd_avx2.h"

#include <immintrin.h>

#include <cstring>
#include <limits>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cpu_features.h"

#define KVGATE_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KVGATE_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline
#define KVGATE_AVX2_LAMBDA __attribute__((target("avx2,fma,f16c"), always_inline))

namespace kvgate::kernels::simd {
namespace {

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

// ---- decoders ----
// Each decoder yields the block's raw values (codes as floats, before any scale). Block formats
// also expose their fp16 scale d (and q4_1's minimum m): the drivers apply d once per block to
// a partial sum instead of once per element, and dequantize applies raw * d (+ m) in exactly
// ggml's order so its output stays bit-identical to the reference.
struct NoBlockScale {
  static constexpr bool kBlockScaled = false, kBlockMin = false;
  static constexpr float kRawFactor = 1.0f;
  static float block_d(const uint8_t*) { return 1.0f; }
  static float block_m(const uint8_t*) { return 0.0f; }
};
// Decoders without a per-row zero point (all but the u{b} formats) and whose dequantize is
// bit-exact per element.
struct NoRowMin {
  static constexpr bool kRowMin = false, kExactDequant = true;
  static float row_min(const uint8_t*) { return 0.0f; }
};

struct F32Dec : NoBlockScale, NoRowMin {
  static constexpr int kElems = 8, kBytes = 32, kHeader = 0;
  static constexpr bool kRowScaled = false;
  static float row_scale(const uint8_t*, float) { return 1.0f; }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    v[0] = _mm256_loadu_ps(reinterpret_cast<const float*>(b));
  }
};

struct F16Dec : NoBlockScale, NoRowMin {
  static constexpr int kElems = 8, kBytes = 16, kHeader = 0;
  static constexpr bool kRowScaled = false;
  static float row_scale(const uint8_t*, float) { return 1.0f; }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    v[0] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  }
};

struct BF16Dec : NoBlockScale, NoRowMin {
  static constexpr int kElems = 8, kBytes = 16, kHeader = 0;
  static constexpr bool kRowScaled = false;
  static float row_scale(const uint8_t*, float) { return 1.0f; }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    v[0] = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
};

// FP8 through binary16: an FP8 code's exponent and mantissa fields land in a half's fields by
// shifting (E5M2 *is* the top byte of a half) and F16C converts; the remaining factor
// 2^(15 - bias) is folded into the row scale (kRawFactor). Exact for every finite code,
// subnormals included, and no float denormal is ever formed (building f32 bits directly would
// create denormals for FP8 subnormals and hit ~100-cycle microcode assists). NaN/inf codes are
// never produced by quantize (it saturates), so the dot/axpy paths do not special-case them;
// dequantize uses a lookup table instead of this decoder.
template <int kManBits, int kBias, bool kRowScaleInHeader>
struct Fp8Dec : NoBlockScale, NoRowMin {
  static constexpr int kElems = 16, kBytes = 16, kHeader = kRowScaleInHeader ? 4 : 0;
  static constexpr bool kRowScaled = true;
  static constexpr float kRawFactor = pow2(15 - kBias);
  static float row_scale(const uint8_t* row, float tensor_scale) {
    return kRowScaleInHeader ? load_f32(row) : tensor_scale;
  }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    const __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    __m256i h;
    if constexpr (kManBits == 2) {
      h = _mm256_slli_epi16(c, 8);
    } else {
      // c + (c & 0x80) moves the sign from bit 7 to bit 8; << 7 then puts it at bit 15 and the
      // 7 exponent/mantissa bits at 13..7, where a half keeps them.
      h = _mm256_slli_epi16(_mm256_add_epi16(c, _mm256_and_si256(c, _mm256_set1_epi16(0x80))), 7);
    }
    v[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    v[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  }
};

struct Int8Dec : NoBlockScale, NoRowMin {
  static constexpr int kElems = 16, kBytes = 16, kHeader = 4;
  static constexpr bool kRowScaled = true;
  static float row_scale(const uint8_t* row, float) { return load_f32(row); }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    v[0] = cvt_i8x8(b);
    v[1] = cvt_i8x8(b + 8);
  }
};

// 16 signed bytes (elements in order) -> two vectors of 8 floats.
KVGATE_AVX2_INLINE void cvt_i8x16(__m128i bytes, __m256* v) {
  v[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
  v[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(bytes, 8)));
}

struct Int4PairDec : NoBlockScale, NoRowMin {
  static constexpr int kElems = 16, kBytes = 8, kHeader = 4;
  static constexpr bool kRowScaled = true;
  static float row_scale(const uint8_t* row, float) { return load_f32(row); }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(bytes, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
    cvt_i8x16(_mm_sub_epi8(_mm_unpacklo_epi8(lo, hi), _mm_set1_epi8(8)), v);  // element 2i then 2i+1
  }
};

KVGATE_AVX2_INLINE float load_f16_hw(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

struct Q8_0Dec : NoRowMin {
  static constexpr int kElems = 32, kBytes = 34, kHeader = 0;
  static constexpr bool kRowScaled = false, kBlockScaled = true, kBlockMin = false;
  static constexpr float kRawFactor = 1.0f;
  static float row_scale(const uint8_t*, float) { return 1.0f; }
  KVGATE_AVX2_INLINE static float block_d(const uint8_t* b) { return load_f16_hw(b); }
  static float block_m(const uint8_t*) { return 0.0f; }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    cvt_i8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)), v);
    cvt_i8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18)), v + 2);
  }
};

// Low nibbles hold elements 0..15 and high nibbles 16..31 (ggml's q4 layout).
KVGATE_AVX2_INLINE void nibbles_to_u8x32(const uint8_t* qs, __m128i* lo, __m128i* hi) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0f);
  *lo = _mm_and_si128(bytes, mask);
  *hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
}

struct Q4_0Dec : NoRowMin {
  static constexpr int kElems = 32, kBytes = 18, kHeader = 0;
  static constexpr bool kRowScaled = false, kBlockScaled = true, kBlockMin = false;
  static constexpr float kRawFactor = 1.0f;
  static float row_scale(const uint8_t*, float) { return 1.0f; }
  KVGATE_AVX2_INLINE static float block_d(const uint8_t* b) { return load_f16_hw(b); }
  static float block_m(const uint8_t*) { return 0.0f; }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    __m128i lo, hi;
    nibbles_to_u8x32(b + 2, &lo, &hi);
    const __m128i eight = _mm_set1_epi8(8);
    cvt_i8x16(_mm_sub_epi8(lo, eight), v);
    cvt_i8x16(_mm_sub_epi8(hi, eight), v + 2);
  }
};

struct Q4_1Dec : NoRowMin {
  static constexpr int kElems = 32, kBytes = 20, kHeader = 0;
  static constexpr bool kRowScaled = false, kBlockScaled = true, kBlockMin = true;
  static constexpr float kRawFactor = 1.0f;
  static float row_scale(const uint8_t*, float) { return 1.0f; }
  KVGATE_AVX2_INLINE static float block_d(const uint8_t* b) { return load_f16_hw(b); }
  KVGATE_AVX2_INLINE static float block_m(const uint8_t* b) { return load_f16_hw(b + 2); }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    __m128i lo, hi;
    nibbles_to_u8x32(b + 4, &lo, &hi);
    cvt_i8x16(lo, v);  // codes 0..15 are the same as signed or unsigned bytes
    cvt_i8x16(hi, v + 2);
  }
};


// iq4_nl: the nibbles index the non-linear grid; one byte shuffle maps 16 indices at once.
struct IQ4NLDec : NoRowMin {
  static constexpr int kElems = 32, kBytes = 18, kHeader = 0;
  static constexpr bool kRowScaled = false, kBlockScaled = true, kBlockMin = false;
  static constexpr float kRawFactor = 1.0f;
  static float row_scale(const uint8_t*, float) { return 1.0f; }
  KVGATE_AVX2_INLINE static float block_d(const uint8_t* b) { return load_f16_hw(b); }
  static float block_m(const uint8_t*) { return 0.0f; }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    const __m128i grid = _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    __m128i lo, hi;
    nibbles_to_u8x32(b + 2, &lo, &hi);
    cvt_i8x16(_mm_shuffle_epi8(grid, lo), v);
    cvt_i8x16(_mm_shuffle_epi8(grid, hi), v + 2);
  }
};


// q5_0 / q5_1: the low nibbles as q4, plus bit j of the little-endian u32 qh as bit 4 of
// element j. Spreading the 32 bits to 32 bytes: byte-broadcast each qh byte over 8 lanes, set
// every bit except the lane's own, and compare with all-ones.
KVGATE_AVX2_INLINE __m256i q5_codes(const uint8_t* qh, const uint8_t* qs) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof bits);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll, 0x0101010101010101ll, 0x0000000000000000ll));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfell)),
                                        _mm256_set1_epi64x(-1));
  __m128i lo, hi;
  nibbles_to_u8x32(qs, &lo, &hi);
  const __m256i nibbles = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
  return _mm256_or_si256(nibbles, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}

template <bool kWithMin>
struct Q5Dec : NoRowMin {
  static constexpr int kElems = 32, kBytes = kWithMin ? 24 : 22, kHeader = 0;
  static constexpr bool kRowScaled = false, kBlockScaled = true, kBlockMin = kWithMin;
  static constexpr float kRawFactor = 1.0f;
  static float row_scale(const uint8_t*, float) { return 1.0f; }
  KVGATE_AVX2_INLINE static float block_d(const uint8_t* b) { return load_f16_hw(b); }
  KVGATE_AVX2_INLINE static float block_m(const uint8_t* b) { return kWithMin ? load_f16_hw(b + 2) : 0.0f; }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    constexpr int kQh = kWithMin ? 4 : 2;
    __m256i codes = q5_codes(b + kQh, b + kQh + 4);
    if constexpr (!kWithMin) codes = _mm256_sub_epi8(codes, _mm256_set1_epi8(16));  // q5_0: q - 16
    cvt_i8x16(_mm256_castsi256_si128(codes), v);
    cvt_i8x16(_mm256_extracti128_si256(codes, 1), v + 2);
  }
};

// E4M3 values of every code, computed at compile time (NaN codes as NaN).
constexpr float e4m3_value(int c) {
  const int e = (c >> 3) & 15, m = c & 7;
  if ((c & 0x7f) == 0x7f) return std::numeric_limits<float>::quiet_NaN();
  // Subnormal: m * 2^-9. Normal: (1 + m/8) * 2^(e - 7) = (8 + m) * 2^(e - 10).
  float v = e == 0 ? static_cast<float>(m) / 512.0f : static_cast<float>(8 + m) / 1024.0f;
  for (int i = 0; i < e; ++i) v *= 2.0f;
  return (c & 0x80) ? -v : v;
}
struct E4m3Table {
  float v[256];
  constexpr E4m3Table() : v() {
    for (int c = 0; c < 256; ++c) v[c] = e4m3_value(c);
  }
};
constexpr E4m3Table kE4m3;

// nvfp4: E2M1 codes mapped by a byte shuffle to twice their value (0, 1, 2, 3, 4, 6, 8, 12,
// all integers), so the block scale carries the factor 1/2; -0 decodes as +0, which is why
// dequantize keeps the scalar path (kExactDequant).
struct Nvfp4Dec {
  static constexpr int kElems = 16, kBytes = 9, kHeader = 0;
  static constexpr bool kRowScaled = true, kBlockScaled = true, kBlockMin = false, kRowMin = false;
  static constexpr bool kExactDequant = false;
  static constexpr float kRawFactor = 1.0f;
  static float row_scale(const uint8_t*, float global_scale) { return global_scale; }
  static float row_min(const uint8_t*) { return 0.0f; }
  static float block_d(const uint8_t* b) { return kE4m3.v[b[0]] * 0.5f; }
  static float block_m(const uint8_t*) { return 0.0f; }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    const __m128i twice = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 1));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(bytes, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
    cvt_i8x16(_mm_shuffle_epi8(twice, _mm_unpacklo_epi8(lo, hi)), v);
  }
};

// u{b}: [f16 scale][f16 zero][codes, b bits each, LSB first]. Eight codes span exactly b bytes;
// broadcasting them to all lanes and shifting each lane by its own multiple of b extracts the
// codes in order without byte shuffles.
template <int kBits>
struct UniformDec : NoBlockScale {
  static constexpr int kElems = 8, kBytes = kBits, kHeader = 4;
  static constexpr bool kRowScaled = true, kRowMin = true, kExactDequant = true;
  KVGATE_AVX2_INLINE static float row_scale(const uint8_t* row, float) { return load_f16_hw(row); }
  KVGATE_AVX2_INLINE static float row_min(const uint8_t* row) { return load_f16_hw(row + 2); }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    if constexpr (kBits == 8) {
      v[0] = cvt_u8x8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
    } else {
      // Whole-width loads: copying 2 or 3 bytes into a zeroed u32 would stall store forwarding.
      uint32_t w;
      if constexpr (kBits == 4) {
        std::memcpy(&w, b, 4);
      } else if constexpr (kBits == 2) {
        uint16_t h;
        std::memcpy(&h, b, 2);
        w = h;
      } else {
        w = b[0] | (static_cast<uint32_t>(b[1]) << 8) | (static_cast<uint32_t>(b[2]) << 16);
      }
      const __m256i shifts = _mm256_setr_epi32(0, kBits, 2 * kBits, 3 * kBits, 4 * kBits, 5 * kBits, 6 * kBits, 7 * kBits);
      const __m256i codes = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), shifts),
                                             _mm256_set1_epi32((1 << kBits) - 1));
      v[0] = _mm256_cvtepi32_ps(codes);
    }
  }
};

// ---- generic drivers ----
// One row's contribution to a dot product over one block: raw . q, scaled by the block's d
// (and q4_1's m times the block's query sum).
// The arithmetic of one row's block once its codes are decoded: shared by the path that decodes
// per query and the one that decodes a tile once for all queries, so both give the same bits.
template <class D>
KVGATE_AVX2_INLINE __m256 dot_decoded(const __m256* v, float d, float m, const __m256* qv, __m256 qsum, __m256 acc) {
  constexpr int V = D::kElems / 8;
  if constexpr (D::kBlockScaled) {
    __m256 p = _mm256_mul_ps(v[0], qv[0]);
    for (int k = 1; k < V; ++k) p = _mm256_fmadd_ps(v[k], qv[k], p);
    acc = _mm256_fmadd_ps(p, _mm256_set1_ps(d), acc);
    if constexpr (D::kBlockMin) acc = _mm256_fmadd_ps(qsum, _mm256_set1_ps(m), acc);
    return acc;
  } else {
    for (int k = 0; k < V; ++k) acc = _mm256_fmadd_ps(v[k], qv[k], acc);
    return acc;
  }
}

template <class D>
KVGATE_AVX2_INLINE __m256 dot_block(const uint8_t* blk, const __m256* qv, __m256 qsum, __m256 acc) {
  constexpr int V = D::kElems / 8;
  __m256 v[V];
  D::decode(blk, v);
  return dot_decoded<D>(v, D::kBlockScaled ? D::block_d(blk) : 1.0f, D::kBlockMin ? D::block_m(blk) : 0.0f, qv, qsum,
                        acc);
}

// Four consecutive rows with every block decoded once, so a tile is decoded once for all the
// query rows of a call (a prefill chunk times the GQA group) instead of once per query row. The
// values are exactly those the per-query path decodes, so results do not change.
inline constexpr int kTileRows = 4;
inline constexpr int kTileMaxHeadDim = 1024;  // kv_format.cc's limit
template <class D>
struct DecodedTile {
  static constexpr int kMaxBlocks = kTileMaxHeadDim / D::kElems;
  __m256 v[kTileRows][kTileMaxHeadDim / 8];
  float d[kTileRows][kMaxBlocks];
  float m[kTileRows][kMaxBlocks];

  KVGATE_AVX2_INLINE void decode(const uint8_t* const* r, int nb) {
    constexpr int V = D::kElems / 8;
    for (int i = 0; i < kTileRows; ++i)
      for (int b = 0; b < nb; ++b) {
        const uint8_t* blk = r[i] + D::kHeader + static_cast<size_t>(b) * D::kBytes;
        D::decode(blk, &v[i][b * V]);
        d[i][b] = D::kBlockScaled ? D::block_d(blk) : 1.0f;
        m[i][b] = D::kBlockMin ? D::block_m(blk) : 0.0f;
      }
  }
};

template <class D>
KVGATE_AVX2_INLINE __m256 query_block_sum(const __m256* qv) {
  constexpr int V = D::kElems / 8;
  __m256 s = qv[0];
  for (int k = 1; k < V; ++k) s = _mm256_add_ps(s, qv[k]);
  return s;
}

template <class D>
KVGATE_AVX2 void dot_rows_impl(const RowFormat& f, const float* q, int n_q, const uint8_t* rows, int n_tokens,
                               float* scores) {
  constexpr int V = D::kElems / 8;
  const int nb = f.head_dim / D::kElems;
  const size_t rb = f.row_bytes;
  // score = (raw . q) * factor * row scale (+ row zero * sum(q) for the u{b} formats).
  auto finish = [&](__m256 acc, __m256 qtotal, const uint8_t* row) KVGATE_AVX2_LAMBDA {
    float score = hsum(acc) * D::kRawFactor * D::row_scale(row, f.scale);
    if constexpr (D::kRowMin) score += hsum(qtotal) * D::row_min(row);
    return score;
  };
  int t = 0;
  if (n_q > 1 && f.head_dim <= kTileMaxHeadDim) {
    DecodedTile<D> tile;
    for (; t + kTileRows <= n_tokens; t += kTileRows) {
      const uint8_t* r[kTileRows];
      for (int i = 0; i < kTileRows; ++i) r[i] = rows + static_cast<size_t>(t + i) * rb;
      tile.decode(r, nb);
      for (int qi = 0; qi < n_q; ++qi) {
        const float* qp = q + static_cast<size_t>(qi) * f.head_dim;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, qtotal = a0;
        for (int b = 0; b < nb; ++b) {
          __m256 qv[V];
          for (int k = 0; k < V; ++k) qv[k] = _mm256_loadu_ps(qp + b * D::kElems + 8 * k);
          const __m256 qsum = (D::kBlockMin || D::kRowMin) ? query_block_sum<D>(qv) : _mm256_setzero_ps();
          if constexpr (D::kRowMin) qtotal = _mm256_add_ps(qtotal, qsum);
          a0 = dot_decoded<D>(&tile.v[0][b * V], tile.d[0][b], tile.m[0][b], qv, qsum, a0);
          a1 = dot_decoded<D>(&tile.v[1][b * V], tile.d[1][b], tile.m[1][b], qv, qsum, a1);
          a2 = dot_decoded<D>(&tile.v[2][b * V], tile.d[2][b], tile.m[2][b], qv, qsum, a2);
          a3 = dot_decoded<D>(&tile.v[3][b * V], tile.d[3][b], tile.m[3][b], qv, qsum, a3);
        }
        float* out = scores + static_cast<size_t>(qi) * n_tokens + t;
        out[0] = finish(a0, qtotal, r[0]);
        out[1] = finish(a1, qtotal, r[1]);
        out[2] = finish(a2, qtotal, r[2]);
        out[3] = finish(a3, qtotal, r[3]);
      }
    }
  }
  for (; t + 4 <= n_tokens; t += 4) {
    const uint8_t* r0 = rows + static_cast<size_t>(t) * rb;
    const uint8_t* r1 = r0 + rb;
    const uint8_t* r2 = r1 + rb;
    const uint8_t* r3 = r2 + rb;
    for (int qi = 0; qi < n_q; ++qi) {
      const float* qp = q + static_cast<size_t>(qi) * f.head_dim;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, qtotal = a0;
      for (int b = 0; b < nb; ++b) {
        const size_t off = D::kHeader + static_cast<size_t>(b) * D::kBytes;
        __m256 qv[V];
        for (int k = 0; k < V; ++k) qv[k] = _mm256_loadu_ps(qp + b * D::kElems + 8 * k);
        const __m256 qsum = (D::kBlockMin || D::kRowMin) ? query_block_sum<D>(qv) : _mm256_setzero_ps();
        if constexpr (D::kRowMin) qtotal = _mm256_add_ps(qtotal, qsum);
        a0 = dot_block<D>(r0 + off, qv, qsum, a0);
        a1 = dot_block<D>(r1 + off, qv, qsum, a1);
        a2 = dot_block<D>(r2 + off, qv, qsum, a2);
        a3 = dot_block<D>(r3 + off, qv, qsum, a3);
      }
      float* out = scores + static_cast<size_t>(qi) * n_tokens + t;
      out[0] = finish(a0, qtotal, r0);
      out[1] = finish(a1, qtotal, r1);
      out[2] = finish(a2, qtotal, r2);
      out[3] = finish(a3, qtotal, r3);
    }
  }
  for (; t < n_tokens; ++t) {
    const uint8_t* r0 = rows + static_cast<size_t>(t) * rb;
    for (int qi = 0; qi < n_q; ++qi) {
      const float* qp = q + static_cast<size_t>(qi) * f.head_dim;
      __m256 a0 = _mm256_setzero_ps(), qtotal = a0;
      for (int b = 0; b < nb; ++b) {
        __m256 qv[V];
        for (int k = 0; k < V; ++k) qv[k] = _mm256_loadu_ps(qp + b * D::kElems + 8 * k);
        const __m256 qsum = (D::kBlockMin || D::kRowMin) ? query_block_sum<D>(qv) : _mm256_setzero_ps();
        if constexpr (D::kRowMin) qtotal = _mm256_add_ps(qtotal, qsum);
        a0 = dot_block<D>(r0 + D::kHeader + static_cast<size_t>(b) * D::kBytes, qv, qsum, a0);
      }
      scores[static_cast<size_t>(qi) * n_tokens + t] = finish(a0, qtotal, r0);
    }
  }
}

// acc += sum over R rows of w_r * value_r for one block whose codes are decoded (v[i] points at
// row i's V vectors, d and m are its block's scale and min); w already carries the row scale,
// and row_add is sum_r weight_r * zero_r for the u{b} formats.
template <class D, int R>
KVGATE_AVX2_INLINE void axpy_decoded(const __m256* const* v, const float* d, const float* m, const float* w,
                                     float row_add, float* ab) {
  constexpr int V = D::kElems / 8;
  __m256 wd[R];
  float add = row_add;
  for (int i = 0; i < R; ++i) {
    wd[i] = _mm256_set1_ps(D::kBlockScaled ? w[i] * d[i] : w[i]);
    if constexpr (D::kBlockMin) add += w[i] * m[i];
  }
  for (int k = 0; k < V; ++k) {
    __m256 s = _mm256_loadu_ps(ab + 8 * k);
    for (int i = 0; i < R; ++i) s = _mm256_fmadd_ps(v[i][k], wd[i], s);
    if constexpr (D::kBlockMin || D::kRowMin) s = _mm256_add_ps(s, _mm256_set1_ps(add));
    _mm256_storeu_ps(ab + 8 * k, s);
  }
}

template <class D, int R>
KVGATE_AVX2_INLINE void axpy_block(const uint8_t* const* r, const float* w, float row_add, size_t off, float* ab) {
  constexpr int V = D::kElems / 8;
  __m256 v[R][V];
  const __m256* vp[R];
  float d[R], m[R];
  for (int i = 0; i < R; ++i) {
    D::decode(r[i] + off, v[i]);
    vp[i] = v[i];
    d[i] = D::kBlockScaled ? D::block_d(r[i] + off) : 1.0f;
    m[i] = D::kBlockMin ? D::block_m(r[i] + off) : 0.0f;
  }
  axpy_decoded<D, R>(vp, d, m, w, row_add, ab);
}

template <class D>
KVGATE_AVX2 void axpy_rows_impl(const RowFormat& f, const float* weights, int n_q, const uint8_t* rows, int n_tokens,
                                float* acc) {
  const int nb = f.head_dim / D::kElems;
  const size_t rb = f.row_bytes;
  int t = 0;
  if (n_q > 1) {
    // Every whole tile of the call decoded once; then each query row's accumulator stays in
    // registers, one head_dim block at a time, across all tiles. Per element the operations and
    // their order are those of axpy_decoded tile after tile, so the result is unchanged.
    constexpr int V = D::kElems / 8;
    const int n_tiles = n_tokens / kTileRows;
    const size_t row_vectors = static_cast<size_t>(nb) * V;
    thread_local std::vector<float> decoded;  // 8 floats per decoded vector
    thread_local std::vector<float> block_d, block_m, w, row_add;
    decoded.resize(static_cast<size_t>(n_tiles) * kTileRows * row_vectors * 8);
    block_d.resize(static_cast<size_t>(n_tiles) * kTileRows * nb);
    block_m.resize(block_d.size());
    w.resize(static_cast<size_t>(n_tiles) * kTileRows);
    row_add.resize(n_tiles);
    for (int row = 0; row < n_tiles * kTileRows; ++row) {
      const uint8_t* r = rows + static_cast<size_t>(row) * rb;
      for (int b = 0; b < nb; ++b) {
        const uint8_t* blk = r + D::kHeader + static_cast<size_t>(b) * D::kBytes;
        __m256 v[V];
        D::decode(blk, v);
        for (int k = 0; k < V; ++k) _mm256_storeu_ps(&decoded[(row * row_vectors + static_cast<size_t>(b) * V + k) * 8], v[k]);
        block_d[static_cast<size_t>(row) * nb + b] = D::kBlockScaled ? D::block_d(blk) : 1.0f;
        block_m[static_cast<size_t>(row) * nb + b] = D::kBlockMin ? D::block_m(blk) : 0.0f;
      }
    }
    for (int qi = 0; qi < n_q; ++qi) {
      const float* wq = weights + static_cast<size_t>(qi) * n_tokens;
      for (int tile = 0; tile < n_tiles; ++tile) {
        row_add[tile] = 0.0f;
        for (int i = 0; i < kTileRows; ++i) {
          const int row = tile * kTileRows + i;
          const uint8_t* r = rows + static_cast<size_t>(row) * rb;
          w[row] = wq[row] * D::kRawFactor * D::row_scale(r, f.scale);
          if constexpr (D::kRowMin) row_add[tile] += wq[row] * D::row_min(r);
        }
      }
      float* a = acc + static_cast<size_t>(qi) * f.head_dim;
      for (int b = 0; b < nb; ++b) {
        __m256 s[V];
        for (int k = 0; k < V; ++k) s[k] = _mm256_loadu_ps(a + b * D::kElems + 8 * k);
        for (int tile = 0; tile < n_tiles; ++tile) {
          __m256 wd[kTileRows];
          float add = row_add[tile];
          for (int i = 0; i < kTileRows; ++i) {
            const int row = tile * kTileRows + i;
            const size_t at = static_cast<size_t>(row) * nb + b;
            wd[i] = _mm256_set1_ps(D::kBlockScaled ? w[row] * block_d[at] : w[row]);
            if constexpr (D::kBlockMin) add += w[row] * block_m[at];
          }
          const float* v = &decoded[(static_cast<size_t>(tile) * kTileRows * row_vectors + static_cast<size_t>(b) * V) * 8];
          for (int k = 0; k < V; ++k) {
            for (int i = 0; i < kTileRows; ++i)
              s[k] = _mm256_fmadd_ps(_mm256_loadu_ps(v + (i * row_vectors + k) * 8), wd[i], s[k]);
            if constexpr (D::kBlockMin || D::kRowMin) s[k] = _mm256_add_ps(s[k], _mm256_set1_ps(add));
          }
        }
        for (int k = 0; k < V; ++k) _mm256_storeu_ps(a + b * D::kElems + 8 * k, s[k]);
      }
    }
    t = n_tiles * kTileRows;
  }
  for (; t + 4 <= n_tokens; t += 4) {
    const uint8_t* r[4] = {rows + static_cast<size_t>(t) * rb, rows + static_cast<size_t>(t + 1) * rb,
                           rows + static_cast<size_t>(t + 2) * rb, rows + static_cast<size_t>(t + 3) * rb};
    for (int qi = 0; qi < n_q; ++qi) {
      const float* wq = weights + static_cast<size_t>(qi) * n_tokens + t;
      float w[4], row_add = 0.0f;
      for (int i = 0; i < 4; ++i) {
        w[i] = wq[i] * D::kRawFactor * D::row_scale(r[i], f.scale);
        if constexpr (D::kRowMin) row_add += wq[i] * D::row_min(r[i]);
      }
      float* a = acc + static_cast<size_t>(qi) * f.head_dim;
      for (int b = 0; b < nb; ++b)
        axpy_block<D, 4>(r, w, row_add, D::kHeader + static_cast<size_t>(b) * D::kBytes, a + b * D::kElems);
    }
  }
  for (; t < n_tokens; ++t) {
    const uint8_t* r[1] = {rows + static_cast<size_t>(t) * rb};
    for (int qi = 0; qi < n_q; ++qi) {
      const float wt = weights[static_cast<size_t>(qi) * n_tokens + t];
      const float w[1] = {wt * D::kRawFactor * D::row_scale(r[0], f.scale)};
      const float row_add = D::kRowMin ? wt * D::row_min(r[0]) : 0.0f;
      float* a = acc + static_cast<size_t>(qi) * f.head_dim;
      for (int b = 0; b < nb; ++b)
        axpy_block<D, 1>(r, w, row_add, D::kHeader + static_cast<size_t>(b) * D::kBytes, a + b * D::kElems);
    }
  }
}

template <class D>
KVGATE_AVX2 void dequantize_row_impl(const RowFormat& f, const uint8_t* row, float* y) {
  constexpr int V = D::kElems / 8;
  const int nb = f.head_dim / D::kElems;
  const __m256 scale = _mm256_set1_ps(D::row_scale(row, f.scale));
  for (int b = 0; b < nb; ++b) {
    const uint8_t* blk = row + D::kHeader + static_cast<size_t>(b) * D::kBytes;
    __m256 v[V];
    D::decode(blk, v);
    for (int k = 0; k < V; ++k) {
      if constexpr (D::kBlockScaled) v[k] = _mm256_mul_ps(v[k], _mm256_set1_ps(D::block_d(blk)));
      if constexpr (D::kBlockMin) v[k] = _mm256_add_ps(v[k], _mm256_set1_ps(D::block_m(blk)));
      if constexpr (D::kRowScaled) v[k] = _mm256_mul_ps(v[k], scale);
      if constexpr (D::kRowMin) v[k] = _mm256_add_ps(v[k], _mm256_set1_ps(D::row_min(row)));
      _mm256_storeu_ps(y + b * D::kElems + 8 * k, v[k]);
    }
  }
}

// ---- encoders (each mirrors its codec's scalar reference operation for operation) ----
KVGATE_AVX2 void quantize_f16(const float* x, int n, uint8_t* dst) {
  for (int i = 0; i < n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
}

// OCP E4M3FN with saturation: the same rounding as f32_to_fp8(·, e4m3fn), done on float bits.
KVGATE_AVX2_INLINE __m256i encode_e4m3fn(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i sign = _mm256_srli_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(int(0x80000000u))), 24);
  const __m256 a = abs_ps(v);
  const __m256i abits = _mm256_castps_si256(a);
  // Normal range: round the 23-bit mantissa to 3 bits, ties to even; the carry may bump the
  // exponent, which is exactly the next code. Rebias 127 -> 7.
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(abits, 20), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(abits, _mm256_add_epi32(_mm256_set1_epi32(0x7ffff), lsb));
  const __m256i normal = _mm256_sub_epi32(_mm256_srli_epi32(rounded, 20), _mm256_set1_epi32(120 << 3));
  // Subnormal range (< 2^-6): adding 2^14 puts the fp8 quantum 2^-9 on the float's last
  // mantissa bit, so the FPU's nearest-even rounding yields the code (8 = smallest normal).
  const __m256 shifted = _mm256_add_ps(a, _mm256_set1_ps(16384.0f));
  const __m256i subnormal = _mm256_sub_epi32(_mm256_castps_si256(shifted), _mm256_set1_epi32(0x46800000));
  __m256i code = _mm256_blendv_epi8(
      normal, subnormal, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(0.015625f), _CMP_LT_OQ)));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7e),
                            _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(448.0f), _CMP_GE_OQ)));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7f), _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  return _mm256_or_si256(code, sign);
}

KVGATE_AVX2 void quantize_fp8_e4m3(const float* x, int n, float scale, uint8_t* dst) {
  const __m256 s = _mm256_set1_ps(scale);
  for (int i = 0; i < n; i += 8)
    store_u32x8_as_u8(encode_e4m3fn(_mm256_div_ps(_mm256_loadu_ps(x + i), s)), dst + i);
}

KVGATE_AVX2 void quantize_fp8_pth(const float* x, int n, uint8_t* row) {
  const float scale = abs_max(x, n) / 448.0f;
  store_f32(row, scale);
  if (scale == 0.0f) {
    std::memset(row + 4, 0, static_cast<size_t>(n));
    return;
  }
  quantize_fp8_e4m3(x, n, scale, row + 4);
}

KVGATE_AVX2 void quantize_int8_pth(const float* x, int n, uint8_t* row) {
  const float scale = abs_max(x, n) / 127.0f;
  store_f32(row, scale);
  if (scale == 0.0f) {
    std::memset(row + 4, 0, static_cast<size_t>(n));
    return;
  }
  const __m256 s = _mm256_set1_ps(scale);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  for (int i = 0; i < n; i += 8) {
    // cvtps rounds to nearest even (the default MXCSR mode), like nearbyintf in the reference.
    __m256i qv = _mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(x + i), s));
    qv = _mm256_min_epi32(_mm256_max_epi32(qv, lo), hi);
    store_i32x8_as_i8(qv, row + 4 + i);
  }
}

KVGATE_AVX2 void quantize_int4_pth(const float* x, int n, uint8_t* row) {
  const float scale = abs_max(x, n) / 7.0f;
  store_f32(row, scale);
  if (scale == 0.0f) {
    std::memset(row + 4, 0x88, static_cast<size_t>(n / 2));
    return;
  }
  const __m256 s = _mm256_set1_ps(scale);
  const __m256i lo = _mm256_set1_epi32(-8), hi = _mm256_set1_epi32(7), eight = _mm256_set1_epi32(8);
  for (int i = 0; i < n; i += 16) {
    __m256i c[2];
    for (int k = 0; k < 2; ++k) {
      const __m256i qv = _mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(x + i + 8 * k), s));
      c[k] = _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(qv, lo), hi), eight);
    }
    const __m128i w0 = _mm_packus_epi32(_mm256_castsi256_si128(c[0]), _mm256_extracti128_si256(c[0], 1));
    const __m128i w1 = _mm_packus_epi32(_mm256_castsi256_si128(c[1]), _mm256_extracti128_si256(c[1], 1));
    const __m128i bytes = _mm_packus_epi16(w0, w1);  // element e0..e15, one per byte
    // Each 16-bit word holds e[2i] | e[2i+1] << 8; fold the high byte into the high nibble.
    const __m128i pairs = _mm_or_si128(_mm_and_si128(bytes, _mm_set1_epi16(0x00ff)),
                                       _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi16(0x00f0)));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(row + 4 + i / 2), _mm_packus_epi16(pairs, pairs));
  }
}

// roundf (half away from zero) exactly: truncate, then step away from zero when the dropped
// fraction is at least one half. x - trunc(x) is exact for |x| < 2^23.
KVGATE_AVX2_INLINE __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = abs_ps(_mm256_sub_ps(v, t));
  const __m256 away = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f));
  return _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), away));
}

KVGATE_AVX2 void quantize_q8_0(const float* x, int n, uint8_t* dst) {
  for (int i = 0; i < n; i += 32, x += 32, dst += 34) {
    const float amax = abs_max(x, 32);
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    store_f16(dst, d);
    const __m256 idv = _mm256_set1_ps(id);
    __m256i c[4];
    for (int k = 0; k < 4; ++k)
      c[k] = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), idv)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2), pack_i32x32_to_i8(c[0], c[1], c[2], c[3]));
  }
}

// Packs 32 codes (0..15, elements in order) as ggml does: byte j = code[j] | code[j + 16] << 4.
KVGATE_AVX2_INLINE void store_q4_nibbles(const __m256i* c, uint8_t* qs) {
  const __m256i b = pack_i32x32_to_i8(c[0], c[1], c[2], c[3]);
  const __m128i lo = _mm256_castsi256_si128(b);
  const __m128i hi = _mm256_extracti128_si256(b, 1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm_or_si128(lo, _mm_slli_epi16(hi, 4)));
}

KVGATE_AVX2 void quantize_q4_0(const float* x, int n, uint8_t* dst) {
  for (int i = 0; i < n; i += 32, x += 32, dst += 18) {
    const float amax = abs_max(x, 32);
    // ggml keeps the signed value of the first element reaching the largest magnitude.
    float max = 0.0f;
    if (amax > 0.0f)
      for (int j = 0; j < 32; ++j)
        if (__builtin_fabsf(x[j]) == amax) {
          max = x[j];
          break;
        }
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    store_f16(dst, d);
    const __m256 idv = _mm256_set1_ps(id), half = _mm256_set1_ps(8.5f);
    __m256i c[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), idv), half);
      c[k] = _mm256_min_epi32(_mm256_cvttps_epi32(v), _mm256_set1_epi32(15));
    }
    store_q4_nibbles(c, dst + 2);
  }
}

// The reference keeps the first element equal to the extreme; only a zero extreme can differ
// in bits (+0 vs -0) between equal candidates, and that sign reaches the stored d and m.
inline float first_equal(const float* x, int n, float value) {
  for (int j = 0; j < n; ++j)
    if (x[j] == value) return x[j];
  return value;
}

KVGATE_AVX2 void quantize_q4_1(const float* x, int n, uint8_t* dst) {
  for (int i = 0; i < n; i += 32, x += 32, dst += 20) {
    __m256 mn = _mm256_loadu_ps(x), mx = mn;
    for (int k = 1; k < 4; ++k) {
      const __m256 v = _mm256_loadu_ps(x + 8 * k);
      mn = _mm256_min_ps(v, mn);
      mx = _mm256_max_ps(v, mx);
    }
    float min = hmin(mn), max = hmax(mx);
    if (min == 0.0f) min = first_equal(x, 32, min);
    if (max == 0.0f) max = first_equal(x, 32, max);
    const float d = (max - min) / 15;
    const float id = d ? 1.0f / d : 0.0f;
    store_f16(dst, d);
    store_f16(dst + 2, min);
    const __m256 idv = _mm256_set1_ps(id), minv = _mm256_set1_ps(min), half = _mm256_set1_ps(0.5f);
    __m256i c[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + 8 * k), minv), idv), half);
      c[k] = _mm256_min_epi32(_mm256_cvttps_epi32(v), _mm256_set1_epi32(15));
    }
    store_q4_nibbles(c, dst + 4);
  }
}

KVGATE_AVX2 float dot_f32_avx2(const float* a, const float* b, int n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  float sum = hsum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

KVGATE_AVX2 void axpy_f32_avx2(float w, const float* x, float* y, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), wv, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += w * x[i];
}

template <class Fn>
bool with_decoder(RowKind kind, Fn&& fn) {
  switch (kind) {
    case RowKind::f32: return fn(F32Dec{});
    case RowKind::f16: return fn(F16Dec{});
    case RowKind::bf16: return fn(BF16Dec{});
    case RowKind::fp8_e4m3fn: return fn(Fp8Dec<3, 7, false>{});
    case RowKind::fp8_e5m2: return fn(Fp8Dec<2, 15, false>{});
    case RowKind::fp8_e4m3fnuz: return fn(Fp8Dec<3, 8, false>{});
    case RowKind::fp8_pth: return fn(Fp8Dec<3, 7, true>{});
    case RowKind::int8_pth: return fn(Int8Dec{});
    case RowKind::int4_pth: return fn(Int4PairDec{});
    case RowKind::q8_0: return fn(Q8_0Dec{});
    case RowKind::q4_0: return fn(Q4_0Dec{});
    case RowKind::q4_1: return fn(Q4_1Dec{});
    case RowKind::q5_0: return fn(Q5Dec<false>{});
    case RowKind::q5_1: return fn(Q5Dec<true>{});
    case RowKind::iq4_nl: return fn(IQ4NLDec{});
    case RowKind::nvfp4: return fn(Nvfp4Dec{});
    case RowKind::u2: return fn(UniformDec<2>{});
    case RowKind::u3: return fn(UniformDec<3>{});
    case RowKind::u4: return fn(UniformDec<4>{});
    case RowKind::u8: return fn(UniformDec<8>{});
  }
  return false;
}

}  // namespace

bool dot_rows(const RowFormat& f, const float* q, int n_q, const uint8_t* rows, int n_tokens, float* scores) {
  if (!cpu_has_avx2_fma_f16c()) return false;
  return with_decoder(f.kind, [&](auto dec) {
    using D = decltype(dec);
    if (f.head_dim % D::kElems != 0) return false;
    dot_rows_impl<D>(f, q, n_q, rows, n_tokens, scores);
    return true;
  });
}

bool axpy_rows(const RowFormat& f, const float* weights, int n_q, const uint8_t* rows, int n_tokens, float* acc) {
  if (!cpu_has_avx2_fma_f16c()) return false;
  return with_decoder(f.kind, [&](auto dec) {
    using D = decltype(dec);
    if (f.head_dim % D::kElems != 0) return false;
    axpy_rows_impl<D>(f, weights, n_q, rows, n_tokens, acc);
    return true;
  });
}

bool dequantize_row(const RowFormat& f, const uint8_t* row, float* y) {
  if (!cpu_has_avx2_fma_f16c()) return false;
  return with_decoder(f.kind, [&](auto dec) {
    using D = decltype(dec);
    // The E4M3 decoders fold a power of two into the scale, so they are not exact per element;
    // the FP8 codecs dequantize through a lookup table instead.
    if constexpr (D::kRawFactor != 1.0f || !D::kExactDequant) {
      return false;
    } else {
      if (f.head_dim % D::kElems != 0) return false;
      dequantize_row_impl<D>(f, row, y);
      return true;
    }
  });
}

float dot_f32(const float* a, const float* b, int n) {
  if (cpu_has_avx2_fma_f16c()) return dot_f32_avx2(a, b, n);
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // four chains, so the compiler can use SSE2
  int i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) s[k] += a[i + k] * b[i + k];
  for (; i < n; ++i) s[0] += a[i] * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

void axpy_f32(float w, const float* x, float* y, int n) {
  if (cpu_has_avx2_fma_f16c()) return axpy_f32_avx2(w, x, y, n);
  for (int i = 0; i < n; ++i) y[i] += w * x[i];
}

bool quantize_row(const RowFormat& f, const float* x, uint8_t* row) {
  if (!cpu_has_avx2_fma_f16c()) return false;
  const int n = f.head_dim;
  switch (f.kind) {
    case RowKind::f16:
      if (n % 8) return false;
      quantize_f16(x, n, row);
      return true;
    case RowKind::fp8_e4m3fn:
      if (n % 8) return false;
      quantize_fp8_e4m3(x, n, f.scale, row);
      return true;
    case RowKind::fp8_pth:
      if (n % 8) return false;
      quantize_fp8_pth(x, n, row);
      return true;
    case RowKind::int8_pth:
      if (n % 8) return false;
      quantize_int8_pth(x, n, row);
      return true;
    case RowKind::int4_pth:
      if (n % 16) return false;
      quantize_int4_pth(x, n, row);
      return true;
    case RowKind::q8_0: quantize_q8_0(x, n, row); return true;
    case RowKind::q4_0: quantize_q4_0(x, n, row); return true;
    case RowKind::q4_1: quantize_q4_1(x, n, row); return true;
    default: return false;
  }
}

}  // namespace kvgate::kernels::simd
