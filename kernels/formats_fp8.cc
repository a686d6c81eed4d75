// FP8 caches with a per-tensor scale, as vLLM and SGLang store them (--kv-cache-dtype fp8,
// fp8_e5m2; ROCm MI300 uses the FNUZ variant): stored = fp8(x / scale), value = fp8 * scale.
// The default scale is 1.0 (vLLM's default when no calibrated k_scale/v_scale is loaded).
// Conversions are core/float_convert.h's: round to nearest even, saturating to +-max.
// Arithmetic traits: vLLM's FlashAttention 3 backend reads only the E4M3 cache, and quantizes the
// query to E4M3 too (vllm/attention/layer.py query_quant, QuantFP8 static per tensor).
#include <cmath>
#include <string>

#include "core/float_convert.h"
#include "kernels/format_families.h"
#include "kernels/quantized_codec.h"
#include "kernels/simd_avx2.h"

namespace kvgate::kernels {
namespace {

// Every code's value, so dequantize is a table lookup that reproduces NaN/inf codes exactly.
struct Fp8Table {
  float value[256];
  explicit Fp8Table(Fp8Kind kind) {
    for (int c = 0; c < 256; ++c) value[c] = fp8_to_f32(static_cast<uint8_t>(c), kind);
  }
};

const Fp8Table& fp8_table(Fp8Kind kind) {
  static const Fp8Table e4m3fn(Fp8Kind::e4m3fn), e5m2(Fp8Kind::e5m2), fnuz(Fp8Kind::e4m3fnuz);
  switch (kind) {
    case Fp8Kind::e4m3fn: return e4m3fn;
    case Fp8Kind::e5m2: return e5m2;
    default: return fnuz;
  }
}

template <Fp8Kind kKind>
class Fp8Codec final : public QuantizedCodec {
 public:
  Fp8Codec(const FormatInfo& info, int head_dim, const FormatOptions& options)
      : QuantizedCodec(info, head_dim, options),
        table_(fp8_table(kKind)),
        row_{info.id, head_dim, static_cast<size_t>(head_dim), options.scale} {
    if (!(options.scale > 0.0f) || !std::isfinite(options.scale))
      throw_usage_error("KV format " + std::string(info.name) + ": scale must be a positive finite number, got " +
                        std::to_string(options.scale));
  }
  size_t group_bytes() const override { return static_cast<size_t>(head_dim_); }

  void dot_rows(const float* q, int n_q, const uint8_t* groups, int n_tokens, float* scores) const override {
    if (!simd::dot_rows(row_, q, n_q, groups, n_tokens, scores)) QuantizedCodec::dot_rows(q, n_q, groups, n_tokens, scores);
  }
  void axpy_rows(const float* w, int n_q, const uint8_t* groups, int n_tokens, float* acc) const override {
    if (!simd::axpy_rows(row_, w, n_q, groups, n_tokens, acc)) QuantizedCodec::axpy_rows(w, n_q, groups, n_tokens, acc);
  }

 protected:
  void encode_row_ref(const float* x, uint8_t* dst) const override {
    for (int i = 0; i < head_dim_; ++i) dst[i] = f32_to_fp8(x[i] / options_.scale, kKind);
  }
  void decode_row_ref(const uint8_t* src, float* y) const override {
    for (int i = 0; i < head_dim_; ++i) y[i] = fp8_to_f32(src[i], kKind) * options_.scale;
  }
  void encode_row(const float* x, uint8_t* dst) const override {
    if (!simd::quantize_row(row_, x, dst)) encode_row_ref(x, dst);
  }
  void decode_row(const uint8_t* src, float* y) const override {
    for (int i = 0; i < head_dim_; ++i) y[i] = table_.value[src[i]] * options_.scale;
  }

 private:
  const Fp8Table& table_;
  simd::RowFormat row_;
};

const FormatInfo kFp8E4m3{.id = FormatId::fp8_e4m3, .name = "fp8_e4m3", .family = "fp8",
                          .mirrors = "vLLM/SGLang --kv-cache-dtype fp8 (fp8_e4m3) on CUDA",
                          .description = "OCP E4M3FN (max 448), per-tensor scale, 8 bits",
                          .for_keys = true, .for_values = true, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                          .options = kOptionScale, .gpu = GpuStorage::rows,
                          .make = &make_quantized_codec<Fp8Codec<Fp8Kind::e4m3fn>>,
                          .arithmetic = {.vllm_fa3 = QueryRounding::fp8_e4m3}};
const FormatInfo kFp8E5m2{.id = FormatId::fp8_e5m2, .name = "fp8_e5m2", .family = "fp8",
                          .mirrors = "vLLM --kv-cache-dtype fp8_e5m2",
                          .description = "OCP E5M2 (max 57344), per-tensor scale, 8 bits",
                          .for_keys = true, .for_values = true, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                          .options = kOptionScale, .gpu = GpuStorage::rows,
                          .make = &make_quantized_codec<Fp8Codec<Fp8Kind::e5m2>>};
const FormatInfo kFp8E4m3Fnuz{.id = FormatId::fp8_e4m3fnuz, .name = "fp8_e4m3fnuz", .family = "fp8",
                              .mirrors = "vLLM --kv-cache-dtype fp8 on ROCm MI300 (gfx94x)",
                              .description = "E4M3FNUZ (max 240, 0x80 = NaN, no -0), per-tensor scale, 8 bits",
                              .for_keys = true, .for_values = true,
                              .head_dim_multiple = 1, .head_dim_power_of_two = false,
                              .options = kOptionScale, .gpu = GpuStorage::rows,
                              .make = &make_quantized_codec<Fp8Codec<Fp8Kind::e4m3fnuz>>};

}  // namespace

void append_fp8_formats(std::vector<const FormatInfo*>& out) {
  out.push_back(&kFp8E4m3);
  out.push_back(&kFp8E5m2);
  out.push_back(&kFp8E4m3Fnuz);
}

}  // namespace kvgate::kernels
