#pragma once
// GPU rows of the per-tensor FP8 formats, as kernels/formats_fp8.cc stores them: one FP8 code
// per element, stored = fp8(x / scale), value = fp8 * scale.
#include "kernels/gpu/rows_common.h"

namespace kvgate::kernels::gpu {

template <Fp8Kind kKind>
struct Fp8Rows {
  KVGATE_HD static size_t row_bytes(int head_dim, const TqParams*) { return static_cast<size_t>(head_dim); }
  KVGATE_HD static void encode(const RowArgs& a, const float* x, uint8_t* dst) {
    for (int i = 0; i < a.head_dim; ++i) dst[i] = f32_to_fp8(rn_div(x[i], a.scale), kKind);
  }
  KVGATE_HD static float element(const RowArgs& a, const uint8_t* row, int i) {
    return rn_mul(fp8_to_f32(row[i], kKind), a.scale);
  }
  template <int N>
  KVGATE_HD static void span(const RowArgs& a, const uint8_t* row, int i0, int n, float* y) {
    KVGATE_UNROLL
    for (int k = 0; k < N; ++k) y[k] = k < n ? rn_mul(fp8_to_f32(row[i0 + k], kKind), a.scale) : 0.0f;
  }
};

}  // namespace kvgate::kernels::gpu
