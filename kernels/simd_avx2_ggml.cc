// AVX2 row kernels of the ggml block formats (kernels/formats_ggml.cc): fused dot/axpy and
// dequantize for every one, quantize for q8_0, q4_0 and q4_1 (the others quantize in scalar).
#include "kernels/ggml_blocks.h"
#include "kernels/simd_row_kernels.h"

namespace kvgate::kernels::simd {
namespace {

using namespace avx2;

struct Q8_0Dec : NoRowMin {
  static constexpr int kElems = 32, kBytes = 34, kHeader = 0;
  static constexpr bool kRowScaled = false, kBlockScaled = true, kBlockMin = false;
  static constexpr float kRawFactor = 1.0f;
  static float row_scale(const uint8_t*, float) { return 1.0f; }
  static constexpr bool kF16Scales = true;  // d (and m) are f16 at the block's start
  KVGATE_AVX2_INLINE static float block_d(const uint8_t* b) { return load_f16_hw(b); }
  static float block_m(const uint8_t*) { return 0.0f; }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    cvt_i8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)), v);
    cvt_i8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18)), v + 2);
  }
  KVGATE_AVX512_INLINE static void decode512(const uint8_t* b, __m512* v) {
    v[0] = avx512::cvt_i8x16_512(b + 2);
    v[1] = avx512::cvt_i8x16_512(b + 18);
  }
};


struct Q4_0Dec : NoRowMin {
  static constexpr int kElems = 32, kBytes = 18, kHeader = 0;
  static constexpr bool kRowScaled = false, kBlockScaled = true, kBlockMin = false;
  static constexpr float kRawFactor = 1.0f;
  static float row_scale(const uint8_t*, float) { return 1.0f; }
  static constexpr bool kF16Scales = true;  // d (and m) are f16 at the block's start
  KVGATE_AVX2_INLINE static float block_d(const uint8_t* b) { return load_f16_hw(b); }
  static float block_m(const uint8_t*) { return 0.0f; }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    __m256i c[4];
    nibbles_to_i32x32(b + 2, c);
    for (int k = 0; k < 4; ++k) v[k] = _mm256_cvtepi32_ps(_mm256_sub_epi32(c[k], _mm256_set1_epi32(8)));
  }
  KVGATE_AVX512_INLINE static void decode512(const uint8_t* b, __m512* v) {
    avx512::lookup_nibbles32(b + 2, avx512::table16(avx512::kNibblesMinus8), v);
  }
};

struct Q4_1Dec : NoRowMin {
  static constexpr int kElems = 32, kBytes = 20, kHeader = 0;
  static constexpr bool kRowScaled = false, kBlockScaled = true, kBlockMin = true;
  static constexpr float kRawFactor = 1.0f;
  static float row_scale(const uint8_t*, float) { return 1.0f; }
  static constexpr bool kF16Scales = true;  // d (and m) are f16 at the block's start
  KVGATE_AVX2_INLINE static float block_d(const uint8_t* b) { return load_f16_hw(b); }
  KVGATE_AVX2_INLINE static float block_m(const uint8_t* b) { return load_f16_hw(b + 2); }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    __m256i c[4];
    nibbles_to_i32x32(b + 4, c);
    for (int k = 0; k < 4; ++k) v[k] = _mm256_cvtepi32_ps(c[k]);
  }
  KVGATE_AVX512_INLINE static void decode512(const uint8_t* b, __m512* v) {
    avx512::lookup_nibbles32(b + 4, avx512::table16(avx512::kNibbles), v);
  }
};

// iq4_nl: the nibbles index the non-linear grid; one byte shuffle maps 16 indices at once.
struct IQ4NLDec : NoRowMin {
  static constexpr int kElems = 32, kBytes = 18, kHeader = 0;
  static constexpr bool kRowScaled = false, kBlockScaled = true, kBlockMin = false;
  static constexpr float kRawFactor = 1.0f;
  static float row_scale(const uint8_t*, float) { return 1.0f; }
  static constexpr bool kF16Scales = true;  // d (and m) are f16 at the block's start
  KVGATE_AVX2_INLINE static float block_d(const uint8_t* b) { return load_f16_hw(b); }
  static float block_m(const uint8_t*) { return 0.0f; }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    const __m128i grid = _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    __m128i lo, hi;
    nibbles_to_u8x32(b + 2, &lo, &hi);
    cvt_i8x16(_mm_shuffle_epi8(grid, lo), v);
    cvt_i8x16(_mm_shuffle_epi8(grid, hi), v + 2);
  }
  KVGATE_AVX512_INLINE static void decode512(const uint8_t* b, __m512* v) {
    static constexpr float kGrid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    avx512::lookup_nibbles32(b + 2, avx512::table16(kGrid), v);
  }
};


// mxfp4: the nibbles index ggml's doubled E2M1 grid, one byte shuffle per 16 of them, and the
// block scale is the E8M0 byte's 2^(e - 128); every product is exact, so dequantize is too.
struct Mxfp4Dec : NoRowMin {
  static constexpr int kElems = 32, kBytes = 17, kHeader = 0;
  static constexpr bool kRowScaled = false, kBlockScaled = true, kBlockMin = false;
  static constexpr float kRawFactor = 1.0f;
  static float row_scale(const uint8_t*, float) { return 1.0f; }
  static float block_d(const uint8_t* b) { return ggml::e8m0_half(b[0]); }
  static float block_m(const uint8_t*) { return 0.0f; }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    const __m128i grid = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    __m128i lo, hi;
    nibbles_to_u8x32(b + 1, &lo, &hi);
    cvt_i8x16(_mm_shuffle_epi8(grid, lo), v);
    cvt_i8x16(_mm_shuffle_epi8(grid, hi), v + 2);
  }
  KVGATE_AVX512_INLINE static void decode512(const uint8_t* b, __m512* v) {
    avx512::lookup_nibbles32(b + 1, avx512::table16(avx512::kE2m1Twice), v);
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
  static constexpr bool kF16Scales = true;  // d (and m) are f16 at the block's start
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

// ---- encoders (each mirrors ggml's quantize_row_*_ref operation for operation) ----
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

bool quantize_q8_0_row(const RowFormat& f, const float* x, uint8_t* row) {
  quantize_q8_0(x, f.head_dim, row);
  return true;
}
bool quantize_q4_0_row(const RowFormat& f, const float* x, uint8_t* row) {
  quantize_q4_0(x, f.head_dim, row);
  return true;
}
bool quantize_q4_1_row(const RowFormat& f, const float* x, uint8_t* row) {
  quantize_q4_1(x, f.head_dim, row);
  return true;
}

constexpr RowKernels kQ8_0 = decoder_kernels<Q8_0Dec>(&quantize_q8_0_row);
constexpr RowKernels kQ5_0 = decoder_kernels<Q5Dec<false>>();
constexpr RowKernels kQ5_1 = decoder_kernels<Q5Dec<true>>();
constexpr RowKernels kQ4_0 = decoder_kernels<Q4_0Dec>(&quantize_q4_0_row);
constexpr RowKernels kQ4_1 = decoder_kernels<Q4_1Dec>(&quantize_q4_1_row);
constexpr RowKernels kIQ4_NL = decoder_kernels<IQ4NLDec>();
constexpr RowKernels kMXFP4 = decoder_kernels<Mxfp4Dec>();

}  // namespace

const RowKernels* ggml_row_kernels(FormatId id) {
  switch (id) {
    case FormatId::q8_0: return &kQ8_0;
    case FormatId::q5_0: return &kQ5_0;
    case FormatId::q5_1: return &kQ5_1;
    case FormatId::q4_0: return &kQ4_0;
    case FormatId::q4_1: return &kQ4_1;
    case FormatId::iq4_nl: return &kIQ4_NL;
    case FormatId::mxfp4: return &kMXFP4;
    default: return nullptr;
  }
}

}  // namespace kvgate::kernels::simd
