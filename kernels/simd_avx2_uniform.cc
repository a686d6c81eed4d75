// AVX2 row kernels of the uniform value formats u{b} (kernels/formats_uniform.cc): fused
// dot/axpy and dequantize; quantize stays scalar.
#include "kernels/simd_row_kernels.h"

namespace kvgate::kernels::simd {
namespace {

using namespace avx2;

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
  // Two blocks; u2 and u3 keep the 256-bit decode (their codes do not split into nibbles or bytes).
  KVGATE_AVX512_INLINE static void decode512(const uint8_t* b, __m512* v)
    requires(kBits == 4 || kBits == 8)
  {
    if constexpr (kBits == 8)
      v[0] = avx512::cvt_u8x16_512(b);
    else
      v[0] = avx512::lookup_nibbles16(b, avx512::table16(avx512::kNibbles));
  }
};

constexpr RowKernels kU2 = decoder_kernels<UniformDec<2>>();
constexpr RowKernels kU3 = decoder_kernels<UniformDec<3>>();
constexpr RowKernels kU4 = decoder_kernels<UniformDec<4>>();
constexpr RowKernels kU8 = decoder_kernels<UniformDec<8>>();

}  // namespace

const RowKernels* uniform_row_kernels(FormatId id) {
  switch (id) {
    case FormatId::u2: return &kU2;
    case FormatId::u3: return &kU3;
    case FormatId::u4: return &kU4;
    case FormatId::u8: return &kU8;
    default: return nullptr;
  }
}

}  // namespace kvgate::kernels::simd
