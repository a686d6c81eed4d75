// AVX2 row kernels of the float formats (kernels/formats_float.cc: f32, f16, bf16) and of the
// per-tensor FP8 formats (kernels/formats_fp8.cc).
#include "kernels/simd_avx2_fp8.h"

namespace kvgate::kernels::simd {
namespace {

using namespace avx2;

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
  KVGATE_AVX512_INLINE static void decode512(const uint8_t* b, __m512* v) {  // two blocks
    v[0] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
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
  KVGATE_AVX512_INLINE static void decode512(const uint8_t* b, __m512* v) {  // two blocks
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
    v[0] = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
};

// ---- encoders (each mirrors its codec's scalar reference operation for operation) ----
KVGATE_AVX2 void quantize_f16(const float* x, int n, uint8_t* dst) {
  // F16C keeps a NaN's sign and payload; the codec stores the one NaN code (core/float_convert.h).
  const __m256 canonical_nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
  for (int i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 w = _mm256_blendv_ps(v, canonical_nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), _mm256_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT));
  }
}

bool quantize_f16_row(const RowFormat& f, const float* x, uint8_t* row) {
  if (f.head_dim % 8) return false;
  quantize_f16(x, f.head_dim, row);
  return true;
}
bool quantize_fp8_e4m3_row(const RowFormat& f, const float* x, uint8_t* row) {
  if (f.head_dim % 8) return false;
  quantize_fp8_e4m3(x, f.head_dim, f.scale, row);
  return true;
}

constexpr RowKernels kF32 = decoder_kernels<F32Dec>();
constexpr RowKernels kF16 = decoder_kernels<F16Dec>(&quantize_f16_row);
constexpr RowKernels kBF16 = decoder_kernels<BF16Dec>();
constexpr RowKernels kFp8E4m3 = decoder_kernels<Fp8Dec<3, 7, false>>(&quantize_fp8_e4m3_row);
constexpr RowKernels kFp8E5m2 = decoder_kernels<Fp8Dec<2, 15, false>>();
constexpr RowKernels kFp8E4m3Fnuz = decoder_kernels<Fp8Dec<3, 8, false>>();

}  // namespace

const RowKernels* float_row_kernels(FormatId id) {
  switch (id) {
    case FormatId::f32: return &kF32;
    case FormatId::f16: return &kF16;
    case FormatId::bf16: return &kBF16;
    case FormatId::fp8_e4m3: return &kFp8E4m3;
    case FormatId::fp8_e5m2: return &kFp8E5m2;
    case FormatId::fp8_e4m3fnuz: return &kFp8E4m3Fnuz;
    default: return nullptr;
  }
}

}  // namespace kvgate::kernels::simd
