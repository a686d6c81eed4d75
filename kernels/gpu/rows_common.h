#pragma once
// What every family of GPU row functions (kernels/gpu/rows_<family>.h) shares: the arguments a
// row's encode and decode may need, unaligned little-endian loads and stores, the rounding
// helpers that reproduce the CPU reference, and llama.cpp's Walsh-Hadamard rotation.
//
// These headers hold the per-row arithmetic of the GPU formats, written once for the device and
// the host: gpu_kv.cu and gpu_attention.cu run them on the device, tests/kernels/gpu_rows_test.cc
// runs the very same functions on the host and checks them byte for byte against the CPU codecs
// (kernels/formats_*.cc). What keeps the two compilations equal: every multiply, add and divide
// goes through rn_* (core/host_device.h), the conversions are core/float_convert.h's, and float
// to integer casts reproduce what the x86-64 build of the CPU reference does.
//
// A row is one token of one KV head (head_dim elements) in the CPU codec's byte layout.
#include <cfloat>
#include <climits>
#include <cstddef>
#include <cstdint>

#include "core/float_convert.h"
#include "core/host_device.h"
#include "kernels/format_id.h"

namespace kvgate::kernels::gpu {

// The largest head_dim whose rotation (signs) fits the constants the kernels read.
inline constexpr int kTqMaxHeadDim = 256;

struct TqParams;  // kernels/gpu/rows_turboquant.h

// The Walsh-Hadamard rotation of a ggml format, built on the host as the CPU codec builds it
// (kernels/gpu/tq_params.h: make_rotation_params); rows are stored as q(R x).
//  - block == 0: rot=hadamard, R = H D / sqrt(head_dim) with random signs (HadamardRotation).
//  - block > 0: rot=wht, llama.cpp's plain H / sqrt(block) on each block of `block` elements
//    (BlockWalshHadamard): x * scale first, then the butterflies; its own inverse.
struct RotationParams {
  float scale = 1.0f;  // 1/sqrt(head_dim) (hadamard) or 1/sqrt(block) (wht), as a float as the CPU holds it
  int block = 0;
  float signs[kTqMaxHeadDim] = {};
};

// What a format's row functions may need besides the row: `scale` is the per-tensor scale of
// fp8_* (stored = fp8(x / scale)) and nvfp4's global scale; `tq` the codec constants of the
// TurboQuant keys (in device memory on the device); `rot` the ggml formats' rotation or null;
// `sub` the token's index inside its KIVI key group.
struct RowArgs {
  int head_dim;
  float scale = 1.0f;
  const TqParams* tq = nullptr;
  const RotationParams* rot = nullptr;
  int sub = 0;
};

// Rows are packed back to back, so multi-byte fields are unaligned: byte by byte, little-endian.
KVGATE_HD void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
KVGATE_HD uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
KVGATE_HD void store_f32(uint8_t* p, float v) {
  const uint32_t u = f32_bits(v);
  for (int k = 0; k < 4; ++k) p[k] = static_cast<uint8_t>(u >> (8 * k));
}
KVGATE_HD float load_f32(const uint8_t* p) {
  return f32_from_bits(p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24));
}

// std::nearbyint, then a clamp in the float domain so NaN lands on `lo` (formats_pth.cc).
KVGATE_HD int round_clamp(float v, int lo, int hi) {
  const float r = rintf(v);
  if (!(r >= static_cast<float>(lo))) return lo;
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

// std::max(acc, |x|) over the row: a NaN element never replaces the running maximum.
KVGATE_HD float row_abs_max(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = fabsf(x[i]);
    amax = amax < a ? a : amax;
  }
  return amax;
}

// The decode of formats whose element is cheap on its own: elements [i0, i0 + n) of a row
// (y[k] = 0 for k >= n), one element() each.
template <class Rows, int N>
KVGATE_HD void span_by_element(const RowArgs& a, const uint8_t* row, int i0, int n, float* y) {
  KVGATE_UNROLL
  for (int k = 0; k < N; ++k) y[k] = k < n ? Rows::element(a, row, i0 + k) : 0.0f;
}

// In-place unnormalized Walsh-Hadamard transform, Sylvester order (kernels/hadamard.h). With
// max_len < n only the stages len < max_len run: the transform of each block of max_len.
KVGATE_HD void fwht(float* x, int n, int max_len = 0) {
  const int limit = max_len > 0 ? max_len : n;
  for (int len = 1; len < limit; len <<= 1)
    for (int i = 0; i < n; i += len << 1)
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = rn_add(a, b);
        x[j + len] = rn_sub(a, b);
      }
}

// out = R x and out = R^T x (out may equal x), operation for operation as HadamardRotation's
// forward and inverse, or BlockWalshHadamard::apply for both.
KVGATE_HD void rotate_forward(const RotationParams& r, int n, const float* x, float* out) {
  if (r.block > 0) {
    for (int i = 0; i < n; ++i) out[i] = rn_mul(x[i], r.scale);
    fwht(out, n, r.block);
    return;
  }
  for (int i = 0; i < n; ++i) out[i] = rn_mul(x[i], r.signs[i]);
  fwht(out, n);
  for (int i = 0; i < n; ++i) out[i] = rn_mul(out[i], r.scale);
}
KVGATE_HD void rotate_inverse(const RotationParams& r, int n, const float* x, float* out) {
  if (r.block > 0) return rotate_forward(r, n, x, out);
  for (int i = 0; i < n; ++i) out[i] = x[i];
  fwht(out, n);
  for (int i = 0; i < n; ++i) out[i] = rn_mul(out[i], rn_mul(r.scale, r.signs[i]));
}

}  // namespace kvgate::kernels::gpu
