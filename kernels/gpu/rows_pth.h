#pragma once
// GPU rows of the per-token-head formats, as kernels/formats_pth.cc stores them:
// [f32 scale][codes], the scale computed from the row's largest magnitude.
#include "kernels/gpu/rows_common.h"

namespace kvgate::kernels::gpu {

// int8_pth: symmetric int8, scale = absmax / 127.
struct Int8PthRows {
  KVGATE_HD static size_t row_bytes(int head_dim, const TqParams*) { return 4 + static_cast<size_t>(head_dim); }
  KVGATE_HD static void encode(const RowArgs& a, const float* x, uint8_t* dst) {
    const float scale = rn_div(row_abs_max(x, a.head_dim), 127.0f);
    store_f32(dst, scale);
    for (int i = 0; i < a.head_dim; ++i)
      dst[4 + i] = static_cast<uint8_t>(static_cast<int8_t>(scale == 0.0f ? 0 : round_clamp(rn_div(x[i], scale), -127, 127)));
  }
  KVGATE_HD static float element(const RowArgs&, const uint8_t* row, int i) {
    return rn_mul(static_cast<float>(static_cast<int8_t>(row[4 + i])), load_f32(row));
  }
  template <int N>
  KVGATE_HD static void span(const RowArgs&, const uint8_t* row, int i0, int n, float* y) {
    const float s = load_f32(row);
    KVGATE_UNROLL
    for (int k = 0; k < N; ++k) y[k] = k < n ? rn_mul(static_cast<float>(static_cast<int8_t>(row[4 + i0 + k])), s) : 0.0f;
  }
};

// fp8_pth: E4M3FN codes with scale = absmax / 448.
struct Fp8PthRows {
  KVGATE_HD static size_t row_bytes(int head_dim, const TqParams*) { return 4 + static_cast<size_t>(head_dim); }
  KVGATE_HD static void encode(const RowArgs& a, const float* x, uint8_t* dst) {
    const float scale = rn_div(row_abs_max(x, a.head_dim), 448.0f);
    store_f32(dst, scale);
    for (int i = 0; i < a.head_dim; ++i) dst[4 + i] = scale == 0.0f ? 0 : f32_to_fp8(rn_div(x[i], scale), Fp8Kind::e4m3fn);
  }
  KVGATE_HD static float element(const RowArgs&, const uint8_t* row, int i) {
    return rn_mul(fp8_to_f32(row[4 + i], Fp8Kind::e4m3fn), load_f32(row));
  }
  template <int N>
  KVGATE_HD static void span(const RowArgs&, const uint8_t* row, int i0, int n, float* y) {
    const float s = load_f32(row);
    KVGATE_UNROLL
    for (int k = 0; k < N; ++k) y[k] = k < n ? rn_mul(fp8_to_f32(row[4 + i0 + k], Fp8Kind::e4m3fn), s) : 0.0f;
  }
};

// int4_pth: symmetric int4 in [-8, 7] stored as q + 8, element 2i in the low nibble.
struct Int4PthRows {
  KVGATE_HD static size_t row_bytes(int head_dim, const TqParams*) { return 4 + static_cast<size_t>(head_dim) / 2; }
  KVGATE_HD static void encode(const RowArgs& a, const float* x, uint8_t* dst) {
    const float scale = rn_div(row_abs_max(x, a.head_dim), 7.0f);
    store_f32(dst, scale);
    for (int i = 0; i + 1 < a.head_dim; i += 2) {
      const int lo = scale == 0.0f ? 0 : round_clamp(rn_div(x[i], scale), -8, 7);
      const int hi = scale == 0.0f ? 0 : round_clamp(rn_div(x[i + 1], scale), -8, 7);
      dst[4 + i / 2] = static_cast<uint8_t>((lo + 8) | ((hi + 8) << 4));
    }
  }
  KVGATE_HD static float element(const RowArgs&, const uint8_t* row, int i) {
    const uint8_t b = row[4 + i / 2];
    return rn_mul(static_cast<float>(((i & 1) ? (b >> 4) : (b & 0x0f)) - 8), load_f32(row));
  }
  template <int N>
  KVGATE_HD static void span(const RowArgs&, const uint8_t* row, int i0, int n, float* y) {
    const float s = load_f32(row);
    KVGATE_UNROLL
    for (int k = 0; k < N; ++k) {
      const int i = i0 + k;
      const uint8_t b = row[4 + i / 2];
      y[k] = k < n ? rn_mul(static_cast<float>(((i & 1) ? (b >> 4) : (b & 0x0f)) - 8), s) : 0.0f;
    }
  }
};

}  // namespace kvgate::kernels::gpu
