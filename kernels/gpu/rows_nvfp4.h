#pragma once
// GPU rows of nvfp4 and nvfp4_4over6, as kernels/formats_nvfp4.cc stores them: E2M1 elements in
// 16-element blocks with an E4M3 block scale. Layout per block: [e4m3 scale][8 bytes, element 2i
// in the low nibble, 2i + 1 in the high]. RowArgs::scale is the per-tensor global scale g.
// nvfp4_4over6 also tries the block scale amax/4 and keeps it where it reconstructs better.
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

struct Nvfp4BlockScale {
  uint8_t code;
  float scale;  // e4m3(code) * g
};
KVGATE_HD Nvfp4BlockScale nvfp4_block_scale(float amax, float divisor, float g) {
  const uint8_t code = f32_to_fp8(rn_div(rn_div(amax, divisor), g), Fp8Kind::e4m3fn);
  return {code, rn_mul(fp8_to_f32(code, Fp8Kind::e4m3fn), g)};
}
KVGATE_HD uint8_t nvfp4_element_code(float x, float block_scale) {
  return block_scale == 0.0f ? 0 : e2m1_code(rn_div(x, block_scale));
}
// Sum of squared errors of a block stored with this scale (formats_nvfp4.cc block_error).
KVGATE_HD float nvfp4_block_error(const float* x, Nvfp4BlockScale s, float g) {
  const float stored = fp8_to_f32(s.code, Fp8Kind::e4m3fn);
  float error = 0.0f;
  for (int j = 0; j < kNvfp4Block; ++j) {
    const float d = rn_sub(rn_mul(rn_mul(e2m1_value(nvfp4_element_code(x[j], s.scale)), stored), g), x[j]);
    error = rn_add(error, rn_mul(d, d));
  }
  return error;
}

template <bool kFourOverSix>
struct Nvfp4Rows {
  KVGATE_HD static size_t row_bytes(int head_dim, const TqParams*) {
    return static_cast<size_t>(head_dim / kNvfp4Block) * kNvfp4BlockBytes;
  }
  KVGATE_HD static void encode(const RowArgs& a, const float* x, uint8_t* dst) {
    const float g = a.scale;
    for (int blk = 0; blk < a.head_dim / kNvfp4Block; ++blk, x += kNvfp4Block, dst += kNvfp4BlockBytes) {
      float amax = 0.0f;
      for (int j = 0; j < kNvfp4Block; ++j) amax = fmaxf(amax, fabsf(x[j]));
      Nvfp4BlockScale s = nvfp4_block_scale(amax, 6.0f, g);
      if (kFourOverSix) {
        const Nvfp4BlockScale four = nvfp4_block_scale(amax, 4.0f, g);
        if (nvfp4_block_error(x, four, g) < nvfp4_block_error(x, s, g)) s = four;
      }
      dst[0] = s.code;
      for (int j = 0; j < kNvfp4Block; j += 2)
        dst[1 + j / 2] =
            static_cast<uint8_t>(nvfp4_element_code(x[j], s.scale) | (nvfp4_element_code(x[j + 1], s.scale) << 4));
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
