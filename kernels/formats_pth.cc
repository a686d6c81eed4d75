// Per-token-head dynamic formats: each token's head vector gets its own scale, computed when
// the token is appended, so no calibration is needed and an outlier token cannot spoil others.
//
// Row layout (all three): [f32 scale][codes]. We keep the scale in f32, not f16, because it
// costs 4 bytes per 64-256 elements (<= 0.5 bit/element) and avoids a second rounding step.
//  - int8_pth: symmetric int8, scale = absmax/127, q = round-to-nearest-even(x / scale) in
//    [-127, 127] (torch.round / __float2int_rn semantics). This is the scheme of ik_llama.cpp's
//    Q8_KV cache type (one scale per row, no blocks) and of the per-head dynamic int8 KV modes
//    of the serving engines; kvgate's byte layout is its own.
//  - fp8_pth: e4m3fn codes with scale = absmax/448 (the dynamic per-token-head FP8 variant of
//    vLLM's fp8 cache, without a calibrated per-tensor scale).
//  - int4_pth: symmetric int4, scale = absmax/7, q in [-7, 7] (code q + 8), two per byte with
//    element 2i in the low nibble and 2i+1 in the high nibble, as PyTorch-side int4 packs do.
// A row of zeros stores scale 0 and code 0 (int4: q = 0, i.e. nibble 8) rather than dividing by 0.
// NaN inputs become the most negative code (int8 -127, int4 -8) in both reference and fast paths.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/float_convert.h"
#include "kernels/format_families.h"
#include "kernels/quantized_codec.h"
#include "kernels/simd_avx2.h"

namespace kvgate::kernels {
namespace {

float abs_max(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}
float load_scale(const uint8_t* row) {
  float s;
  std::memcpy(&s, row, sizeof s);
  return s;
}
void store_scale(uint8_t* row, float s) { std::memcpy(row, &s, sizeof s); }

// Round to nearest even and clamp in the float domain, so NaN lands on `lo` deterministically.
int round_clamp(float v, int lo, int hi) {
  const float r = std::nearbyint(v);
  if (!(r >= static_cast<float>(lo))) return lo;
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

// Shared plumbing: fast paths go to simd:: and fall back to the scalar definitions.
class PthCodec : public QuantizedCodec {
 public:
  PthCodec(const FormatInfo& info, int head_dim, const FormatOptions& options, size_t bytes)
      : QuantizedCodec(info, head_dim, options), row_{info.id, head_dim, bytes, 1.0f} {}
  size_t group_bytes() const override { return row_.row_bytes; }
  void dot_rows(const float* q, int n_q, const uint8_t* groups, int n_tokens, float* scores) const override {
    if (!simd::dot_rows(row_, q, n_q, groups, n_tokens, scores)) QuantizedCodec::dot_rows(q, n_q, groups, n_tokens, scores);
  }
  void axpy_rows(const float* w, int n_q, const uint8_t* groups, int n_tokens, float* acc) const override {
    if (!simd::axpy_rows(row_, w, n_q, groups, n_tokens, acc)) QuantizedCodec::axpy_rows(w, n_q, groups, n_tokens, acc);
  }

 protected:
  void encode_row(const float* x, uint8_t* dst) const override {
    if (!simd::quantize_row(row_, x, dst)) encode_row_ref(x, dst);
  }
  void decode_row(const uint8_t* src, float* y) const override {
    if (!simd::dequantize_row(row_, src, y)) decode_row_ref(src, y);
  }
  simd::RowFormat row_;
};

class Int8PthCodec final : public PthCodec {
 public:
  Int8PthCodec(const FormatInfo& info, int head_dim, const FormatOptions& options)
      : PthCodec(info, head_dim, options, 4 + static_cast<size_t>(head_dim)) {}

 protected:
  void encode_row_ref(const float* x, uint8_t* dst) const override {
    const float scale = abs_max(x, head_dim_) / 127.0f;
    store_scale(dst, scale);
    for (int i = 0; i < head_dim_; ++i)
      dst[4 + i] = static_cast<uint8_t>(static_cast<int8_t>(scale == 0.0f ? 0 : round_clamp(x[i] / scale, -127, 127)));
  }
  void decode_row_ref(const uint8_t* src, float* y) const override {
    const float scale = load_scale(src);
    for (int i = 0; i < head_dim_; ++i) y[i] = static_cast<float>(static_cast<int8_t>(src[4 + i])) * scale;
  }
};

class Fp8PthCodec final : public PthCodec {
 public:
  Fp8PthCodec(const FormatInfo& info, int head_dim, const FormatOptions& options)
      : PthCodec(info, head_dim, options, 4 + static_cast<size_t>(head_dim)) {}

 protected:
  void encode_row_ref(const float* x, uint8_t* dst) const override {
    const float scale = abs_max(x, head_dim_) / 448.0f;
    store_scale(dst, scale);
    for (int i = 0; i < head_dim_; ++i) dst[4 + i] = scale == 0.0f ? 0 : f32_to_fp8(x[i] / scale, Fp8Kind::e4m3fn);
  }
  void decode_row_ref(const uint8_t* src, float* y) const override {
    const float scale = load_scale(src);
    for (int i = 0; i < head_dim_; ++i) y[i] = fp8_to_f32(src[4 + i], Fp8Kind::e4m3fn) * scale;
  }
};

class Int4PthCodec final : public PthCodec {
 public:
  Int4PthCodec(const FormatInfo& info, int head_dim, const FormatOptions& options)
      : PthCodec(info, head_dim, options, 4 + static_cast<size_t>(head_dim) / 2) {}

 protected:
  void encode_row_ref(const float* x, uint8_t* dst) const override {
    const float scale = abs_max(x, head_dim_) / 7.0f;
    store_scale(dst, scale);
    for (int i = 0; i < head_dim_; i += 2) {
      const int lo = scale == 0.0f ? 0 : round_clamp(x[i] / scale, -8, 7);
      const int hi = scale == 0.0f ? 0 : round_clamp(x[i + 1] / scale, -8, 7);
      dst[4 + i / 2] = static_cast<uint8_t>((lo + 8) | ((hi + 8) << 4));
    }
  }
  void decode_row_ref(const uint8_t* src, float* y) const override {
    const float scale = load_scale(src);
    for (int i = 0; i < head_dim_; i += 2) {
      const uint8_t b = src[4 + i / 2];
      y[i] = static_cast<float>((b & 0x0f) - 8) * scale;
      y[i + 1] = static_cast<float>((b >> 4) - 8) * scale;
    }
  }
};

const FormatInfo kInt8Pth{.id = FormatId::int8_pth, .name = "int8_pth", .family = "per-token-head",
                          .mirrors = "ik_llama.cpp q8_KV-style per-row int8 (symmetric, one scale per token-head)",
                          .description = "int8 symmetric, f32 scale absmax/127 per token-head, 8.25 bits at d=128",
                          .for_keys = true, .for_values = true, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                          .options = 0, .gpu = GpuStorage::rows, .make = &make_quantized_codec<Int8PthCodec>};
const FormatInfo kFp8Pth{.id = FormatId::fp8_pth, .name = "fp8_pth", .family = "per-token-head",
                         .mirrors = "dynamic per-token-head FP8 (e4m3, scale absmax/448)",
                         .description = "fp8 e4m3fn, f32 scale absmax/448 per token-head, 8.25 bits at d=128",
                         .for_keys = true, .for_values = true, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                         .options = 0, .gpu = GpuStorage::rows, .make = &make_quantized_codec<Fp8PthCodec>};
const FormatInfo kInt4Pth{.id = FormatId::int4_pth, .name = "int4_pth", .family = "per-token-head",
                          .mirrors = "per-token-head symmetric int4 (KIVI-style values without groups)",
                          .description = "int4 symmetric [-7,7], f32 scale absmax/7 per token-head, 4.25 bits at d=128",
                          .for_keys = true, .for_values = true, .head_dim_multiple = 2, .head_dim_power_of_two = false,
                          .options = 0, .gpu = GpuStorage::rows, .make = &make_quantized_codec<Int4PthCodec>};

}  // namespace

void append_per_token_head_formats(std::vector<const FormatInfo*>& out) {
  out.push_back(&kInt8Pth);
  out.push_back(&kFp8Pth);
  out.push_back(&kInt4Pth);
}

}  // namespace kvgate::kernels
