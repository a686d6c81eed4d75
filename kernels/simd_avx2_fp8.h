#pragma once
// The E4M3/E5M2 row decoder and the E4M3FN encoder, shared by the per-tensor FP8 formats
// (simd_avx2_float.cc) and fp8_pth (simd_avx2_pth.cc).
#include "kernels/simd_row_kernels.h"

namespace kvgate::kernels::simd::avx2 {

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
    const __m256i h = halves(b);
    v[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    v[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  }
  KVGATE_AVX512_INLINE static void decode512(const uint8_t* b, __m512* v) {
    v[0] = _mm512_cvtph_ps(halves(b));
  }

 private:
  // The 16 codes at b as binary16 bit patterns (see above).
  KVGATE_AVX2_INLINE static __m256i halves(const uint8_t* b) {
    const __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    if constexpr (kManBits == 2) return _mm256_slli_epi16(c, 8);
    // c + (c & 0x80) moves the sign from bit 7 to bit 8; << 7 then puts it at bit 15 and the
    // 7 exponent/mantissa bits at 13..7, where a half keeps them.
    return _mm256_slli_epi16(_mm256_add_epi16(c, _mm256_and_si256(c, _mm256_set1_epi16(0x80))), 7);
  }
};

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
  // A NaN takes the one unsigned NaN code, as f32_to_fp8 (core/float_convert.h says why).
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  code = _mm256_or_si256(code, sign);
  return _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7f), nan);
}

KVGATE_AVX2 inline void quantize_fp8_e4m3(const float* x, int n, float scale, uint8_t* dst) {
  const __m256 s = _mm256_set1_ps(scale);
  for (int i = 0; i < n; i += 8)
    store_u32x8_as_u8(encode_e4m3fn(_mm256_div_ps(_mm256_loadu_ps(x + i), s)), dst + i);
}

}  // namespace kvgate::kernels::simd::avx2
