#pragma once
// GPU rows of nvfp4, as kernels/formats_nvfp4.cc stores them: E2M1 elements in 16-element blocks
// with an E4M3 block scale. Layout per block: [e4m3 scale][8 bytes, element 2i in the low
// nibble, 2i + 1 in the high]. RowArgs::scale is the per-tensor global scale g.
#include "kernels/gpu/rows_common.h"

namespace kvgate::kernels::gpu {

inline constexpr int kNvfp4Block = 16;
inline constexpr int kNvfp4BlockBytes = 1 + kNvfp4Block / 2;

// Round to nearest, ties to the even code, saturating at 6; the sign bit is kept for -0 and NaN.
KVGATE_HD uint8_t e2m1_code(float v) {
  const float a = fabsf(v);
  uint8_t code;
  if (a <= 0.25f) code = 0;
  else if (a < 0.75f) code = 1;
  else if (a <= 1.25f) code = 2;
  else if (a < 1.75f) code = 3;
  else if (a <= 2.5f) code = 4;
  else if (a < 3.5f) code = 5;
  else if (a <= 5.0f) code = 6;
  else code = 7;
  return static_cast<uint8_t>(code | ((f32_bits(v) >> 31) ? 0x8 : 0x0));
}
// Twice the magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} fit a nibble each, so the table is one word.
KVGATE_HD float e2m1_value(uint32_t code) {
  const float v = static_cast<float>((0xc8643210u >> (4 * (code & 7))) & 0xfu) * 0.5f;
  return (code & 0x8) ? -v : v;
}

struct Nvfp4Rows {
  KVGATE_HD static size_t row_bytes(int head_dim, const TqParams*) {
    return static_cast<size_t>(head_dim / kNvfp4Block) * kNvfp4BlockBytes;
  }
  KVGATE_HD static void encode(const RowArgs& a, const float* x, uint8_t* dst) {
    const float g = a.scale;
    for (int blk = 0; blk < a.head_dim / kNvfp4Block; ++blk, x += kNvfp4Block, dst += kNvfp4BlockBytes) {
      float amax = 0.0f;
      for (int j = 0; j < kNvfp4Block; ++j) amax = fmaxf(amax, fabsf(x[j]));
      const uint8_t scale_code = f32_to_fp8(rn_div(rn_div(amax, 6.0f), g), Fp8Kind::e4m3fn);
      const float block_scale = rn_mul(fp8_to_f32(scale_code, Fp8Kind::e4m3fn), g);
      dst[0] = scale_code;
      for (int j = 0; j < kNvfp4Block; j += 2) {
        const uint8_t lo = block_scale == 0.0f ? 0 : e2m1_code(rn_div(x[j], block_scale));
        const uint8_t hi = block_scale == 0.0f ? 0 : e2m1_code(rn_div(x[j + 1], block_scale));
        dst[1 + j / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
  KVGATE_HD static float element(const RowArgs& a, const uint8_t* row, int i) {
    const uint8_t* b = row + (i / kNvfp4Block) * kNvfp4BlockBytes;
    const uint8_t packed = b[1 + (i % kNvfp4Block) / 2];
    return rn_mul(rn_mul(e2m1_value((i & 1) ? packed >> 4 : packed & 0x0f), fp8_to_f32(b[0], Fp8Kind::e4m3fn)), a.scale);
  }
  // A span lies inside one block, so the block's scale is read once.
  template <int N>
  KVGATE_HD static void span(const RowArgs& a, const uint8_t* row, int i0, int n, float* y) {
    static_assert(kNvfp4Block % N == 0, "a span must not straddle an nvfp4 block");
    const uint8_t* b = row + (i0 / kNvfp4Block) * kNvfp4BlockBytes;
    const float s = fp8_to_f32(b[0], Fp8Kind::e4m3fn);
    KVGATE_UNROLL
    for (int k = 0; k < N; ++k) {
      const int j = i0 % kNvfp4Block + k;
      const uint8_t packed = b[1 + j / 2];
      y[k] = k < n ? rn_mul(rn_mul(e2m1_value((j & 1) ? packed >> 4 : packed & 0x0f), s), a.scale) : 0.0f;
    }
  }
};

}  // namespace kvgate::kernels::gpu
