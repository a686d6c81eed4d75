#pragma once
// GPU rows of the unquantized formats, as kernels/formats_float.cc stores them.
#include "kernels/gpu/rows_common.h"

namespace kvgate::kernels::gpu {

// f32: the bits as they are, NaN payloads included (the CPU codec copies).
struct F32Rows {
  KVGATE_HD static size_t row_bytes(int head_dim, const TqParams*) { return 4 * static_cast<size_t>(head_dim); }
  KVGATE_HD static void encode(const RowArgs& a, const float* x, uint8_t* dst) {
    for (int i = 0; i < a.head_dim; ++i) store_f32(dst + 4 * i, x[i]);
  }
  KVGATE_HD static float element(const RowArgs&, const uint8_t* row, int i) { return load_f32(row + 4 * i); }
  template <int N>
  KVGATE_HD static void span(const RowArgs&, const uint8_t* row, int i0, int n, float* y) {
    KVGATE_UNROLL
    for (int k = 0; k < N; ++k) y[k] = k < n ? load_f32(row + 4 * (i0 + k)) : 0.0f;
  }
};

// f16 and bf16: one 16-bit float per element, round to nearest even.
template <bool kBf16>
struct Half16Rows {
  KVGATE_HD static uint16_t encode_half(float v) { return kBf16 ? f32_to_bf16(v) : f32_to_f16(v); }
  KVGATE_HD static float decode_half(uint16_t h) { return kBf16 ? bf16_to_f32(h) : f16_to_f32(h); }
  KVGATE_HD static size_t row_bytes(int head_dim, const TqParams*) { return 2 * static_cast<size_t>(head_dim); }
  KVGATE_HD static void encode(const RowArgs& a, const float* x, uint8_t* dst) {
    for (int i = 0; i < a.head_dim; ++i) store_u16(dst + 2 * i, encode_half(x[i]));
  }
  KVGATE_HD static float element(const RowArgs&, const uint8_t* row, int i) { return decode_half(load_u16(row + 2 * i)); }
  template <int N>
  KVGATE_HD static void span(const RowArgs&, const uint8_t* row, int i0, int n, float* y) {
    KVGATE_UNROLL
    for (int k = 0; k < N; ++k) y[k] = k < n ? decode_half(load_u16(row + 2 * (i0 + k))) : 0.0f;
  }
};
using F16Rows = Half16Rows<false>;
using BF16Rows = Half16Rows<true>;

}  // namespace kvgate::kernels::gpu
