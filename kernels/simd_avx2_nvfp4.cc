// AVX2 row kernels of nvfp4 (kernels/formats_nvfp4.cc): fused dot/axpy; quantize and
// dequantize stay scalar.
#include <limits>

#include "kernels/simd_row_kernels.h"

namespace kvgate::kernels::simd {
namespace {

using namespace avx2;

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
  KVGATE_AVX512_INLINE static void decode512(const uint8_t* b, __m512* v) {
    v[0] = avx512::lookup_nibbles16(b + 1, avx512::table16(avx512::kE2m1Twice));
  }
};

// u{b}: [f16 scale][f16 zero][codes, b bits each, LSB first]. Eight codes span exactly b bytes;
// broadcasting them to all lanes and shifting each lane by its own multiple of b extracts the

constexpr RowKernels kNvfp4 = decoder_kernels<Nvfp4Dec>();

}  // namespace

// nvfp4_4over6 differs only in how it picks the block scale: the decode kernels are shared.
const RowKernels* nvfp4_row_kernels(FormatId id) {
  return id == FormatId::nvfp4 || id == FormatId::nvfp4_4over6 ? &kNvfp4 : nullptr;
}

}  // namespace kvgate::kernels::simd
