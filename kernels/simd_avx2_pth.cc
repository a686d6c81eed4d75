// AVX2 row kernels of the per-token-head formats (kernels/formats_pth.cc).
#include "kernels/simd_avx2_fp8.h"

namespace kvgate::kernels::simd {
namespace {

using namespace avx2;

struct Int8Dec : NoBlockScale, NoRowMin {
  static constexpr int kElems = 16, kBytes = 16, kHeader = 4;
  static constexpr bool kRowScaled = true;
  static float row_scale(const uint8_t* row, float) { return load_f32(row); }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    v[0] = cvt_i8x8(b);
    v[1] = cvt_i8x8(b + 8);
  }
  KVGATE_AVX512_INLINE static void decode512(const uint8_t* b, __m512* v) { v[0] = avx512::cvt_i8x16_512(b); }
};

struct Int4PairDec : NoBlockScale, NoRowMin {
  static constexpr int kElems = 16, kBytes = 8, kHeader = 4;
  static constexpr bool kRowScaled = true;
  static float row_scale(const uint8_t* row, float) { return load_f32(row); }
  KVGATE_AVX2_INLINE static void decode(const uint8_t* b, __m256* v) {
    const __m256i eight = _mm256_set1_epi32(8);
    v[0] = _mm256_cvtepi32_ps(_mm256_sub_epi32(nibbles8_to_i32(b), eight));
    v[1] = _mm256_cvtepi32_ps(_mm256_sub_epi32(nibbles8_to_i32(b + 4), eight));
  }
  KVGATE_AVX512_INLINE static void decode512(const uint8_t* b, __m512* v) {
    v[0] = avx512::lookup_nibbles16(b, avx512::table16(avx512::kNibblesMinus8));
  }
};

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

bool quantize_fp8_pth_row(const RowFormat& f, const float* x, uint8_t* row) {
  if (f.head_dim % 8) return false;
  quantize_fp8_pth(x, f.head_dim, row);
  return true;
}
bool quantize_int8_pth_row(const RowFormat& f, const float* x, uint8_t* row) {
  if (f.head_dim % 8) return false;
  quantize_int8_pth(x, f.head_dim, row);
  return true;
}
bool quantize_int4_pth_row(const RowFormat& f, const float* x, uint8_t* row) {
  if (f.head_dim % 16) return false;
  quantize_int4_pth(x, f.head_dim, row);
  return true;
}

constexpr RowKernels kInt8Pth = decoder_kernels<Int8Dec>(&quantize_int8_pth_row);
constexpr RowKernels kFp8Pth = decoder_kernels<Fp8Dec<3, 7, true>>(&quantize_fp8_pth_row);
constexpr RowKernels kInt4Pth = decoder_kernels<Int4PairDec>(&quantize_int4_pth_row);

}  // namespace

const RowKernels* pth_row_kernels(FormatId id) {
  switch (id) {
    case FormatId::int8_pth: return &kInt8Pth;
    case FormatId::fp8_pth: return &kFp8Pth;
    case FormatId::int4_pth: return &kInt4Pth;
    default: return nullptr;
  }
}

}  // namespace kvgate::kernels::simd
