#pragma once
// GPU rows of the uniform value formats u{b}, as kernels/formats_uniform.cc stores them:
// [f16 scale][f16 zero][codes, b bits each, LSB-first].
#include "kernels/gpu/rows_common.h"

namespace kvgate::kernels::gpu {

KVGATE_HD uint32_t uniform_code(const uint8_t* codes, int i, int bits) {
  const int bit = i * bits;
  uint32_t w = codes[bit / 8];
  if (bit % 8 + bits > 8) w |= static_cast<uint32_t>(codes[bit / 8 + 1]) << 8;
  return (w >> (bit % 8)) & ((1u << bits) - 1u);
}

template <int kBits>
struct UniformRows {
  KVGATE_HD static size_t row_bytes(int head_dim, const TqParams*) {
    return 4 + (static_cast<size_t>(head_dim) * kBits + 7) / 8;
  }
  KVGATE_HD static void encode(const RowArgs& a, const float* x, uint8_t* dst) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int i = 0; i < a.head_dim; ++i) {
      min = fminf(min, x[i]);
      max = fmaxf(max, x[i]);
    }
    const int levels = (1 << kBits) - 1;
    const uint16_t scale_h = f32_to_f16(rn_div(rn_sub(max, min), static_cast<float>(levels)));
    const uint16_t zero_h = f32_to_f16(min);
    store_u16(dst, scale_h);
    store_u16(dst + 2, zero_h);
    const float s = f16_to_f32(scale_h), z = f16_to_f32(zero_h);
    uint8_t* codes = dst + 4;
    const int code_bytes = (a.head_dim * kBits + 7) / 8;
    for (int b = 0; b < code_bytes; ++b) codes[b] = 0;
    for (int i = 0; i < a.head_dim; ++i) {
      int c = 0;
      if (s > 0.0f && s <= FLT_MAX) {
        const float r = rintf(rn_div(rn_sub(x[i], z), s));
        c = r >= 0.0f ? static_cast<int>(r < static_cast<float>(levels) ? r : static_cast<float>(levels)) : 0;
      }
      const int bit = i * kBits;
      const uint32_t shifted = static_cast<uint32_t>(c) << (bit % 8);
      codes[bit / 8] |= static_cast<uint8_t>(shifted);
      if (bit % 8 + kBits > 8) codes[bit / 8 + 1] |= static_cast<uint8_t>(shifted >> 8);
    }
  }
  KVGATE_HD static float element(const RowArgs&, const uint8_t* row, int i) {
    return rn_add(rn_mul(static_cast<float>(uniform_code(row + 4, i, kBits)), f16_to_f32(load_u16(row))),
                  f16_to_f32(load_u16(row + 2)));
  }
  template <int N>
  KVGATE_HD static void span(const RowArgs&, const uint8_t* row, int i0, int n, float* y) {
    const float s = f16_to_f32(load_u16(row)), z = f16_to_f32(load_u16(row + 2));
    KVGATE_UNROLL
    for (int k = 0; k < N; ++k)
      y[k] = k < n ? rn_add(rn_mul(static_cast<float>(uniform_code(row + 4, i0 + k, kBits)), s), z) : 0.0f;
  }
};

}  // namespace kvgate::kernels::gpu
