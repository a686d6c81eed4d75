// TurboQuant's value formats u{b}: per-token asymmetric uniform quantization with an fp16
// scale and an fp16 zero point (the row minimum), as the TurboQuant design pairs with its
// rotated-codebook keys. Usable for keys too, though keys gain more from tq{b}.
//   scale = (max - min) / (2^b - 1), both stored as fp16; codes use the fp16-rounded values
//   (s, z) so that the stored codes are optimal for what is decoded:
//   c = clamp(round_half_even((x - z) / s), 0, 2^b - 1),  x ~ c * s + z.
// Layout per token: [f16 scale][f16 zero][codes packed LSB-first, b bits each]. A constant
// row stores scale 0 and codes 0. NaN inputs get code 0.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/float_convert.h"
#include "kernels/format_families.h"
#include "kernels/quantized_codec.h"
#include "kernels/simd_avx2.h"

namespace kvgate::kernels {
namespace {

template <int kBits>
class UniformCodec final : public QuantizedCodec {
 public:
  UniformCodec(const FormatInfo& info, int head_dim, const FormatOptions& options)
      : QuantizedCodec(info, head_dim, options),
        row_{info.id, head_dim, 4 + (static_cast<size_t>(head_dim) * kBits + 7) / 8} {}
  size_t group_bytes() const override { return row_.row_bytes; }
  void dot_rows(const float* q, int n_q, const uint8_t* groups, int n_tokens, float* scores) const override {
    if (!simd::dot_rows(row_, q, n_q, groups, n_tokens, scores))
      QuantizedCodec::dot_rows(q, n_q, groups, n_tokens, scores);
  }
  void axpy_rows(const float* w, int n_q, const uint8_t* groups, int n_tokens, float* acc) const override {
    if (!simd::axpy_rows(row_, w, n_q, groups, n_tokens, acc)) QuantizedCodec::axpy_rows(w, n_q, groups, n_tokens, acc);
  }

 protected:
  void encode_row_ref(const float* x, uint8_t* dst) const override {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int i = 0; i < head_dim_; ++i) {
      min = std::fmin(min, x[i]);
      max = std::fmax(max, x[i]);
    }
    constexpr int kLevels = (1 << kBits) - 1;
    const uint16_t scale_h = f32_to_f16((max - min) / kLevels);
    const uint16_t zero_h = f32_to_f16(min);
    std::memcpy(dst, &scale_h, 2);
    std::memcpy(dst + 2, &zero_h, 2);
    const float s = f16_to_f32(scale_h), z = f16_to_f32(zero_h);
    uint8_t* codes = dst + 4;
    std::memset(codes, 0, group_bytes() - 4);
    for (int i = 0; i < head_dim_; ++i) {
      int c = 0;
      if (s > 0.0f && std::isfinite(s)) {
        const float r = std::nearbyint((x[i] - z) / s);
        c = r >= 0.0f ? static_cast<int>(std::min(r, static_cast<float>(kLevels))) : 0;
      }
      put_bits(codes, i, static_cast<uint32_t>(c));
    }
  }
  void decode_row(const uint8_t* src, float* y) const override {
    if (!simd::dequantize_row(row_, src, y)) decode_row_ref(src, y);
  }
  void decode_row_ref(const uint8_t* src, float* y) const override {
    uint16_t scale_h, zero_h;
    std::memcpy(&scale_h, src, 2);
    std::memcpy(&zero_h, src + 2, 2);
    const float s = f16_to_f32(scale_h), z = f16_to_f32(zero_h);
    for (int i = 0; i < head_dim_; ++i) y[i] = static_cast<float>(get_bits(src + 4, i)) * s + z;
  }

 private:
  simd::RowFormat row_;
  static void put_bits(uint8_t* codes, int i, uint32_t c) {
    const size_t bit = static_cast<size_t>(i) * kBits;
    const uint32_t shifted = c << (bit % 8);
    codes[bit / 8] |= static_cast<uint8_t>(shifted);
    if (bit % 8 + kBits > 8) codes[bit / 8 + 1] |= static_cast<uint8_t>(shifted >> 8);
  }
  static uint32_t get_bits(const uint8_t* codes, int i) {
    const size_t bit = static_cast<size_t>(i) * kBits;
    uint32_t w = codes[bit / 8];
    if (bit % 8 + kBits > 8) w |= static_cast<uint32_t>(codes[bit / 8 + 1]) << 8;
    return (w >> (bit % 8)) & ((1u << kBits) - 1u);
  }
};

const FormatInfo kU2{.id = FormatId::u2, .name = "u2", .family = "uniform",
                     .mirrors = "TurboQuant values (vLLM turboquant presets), 2-bit",
                     .description = "per-token asymmetric uniform, fp16 scale + fp16 zero, 2 bits",
                     .for_keys = true, .for_values = true, .head_dim_multiple = 4, .head_dim_power_of_two = false,
                     .options = 0, .gpu = GpuStorage::rows, .make = &make_quantized_codec<UniformCodec<2>>};
const FormatInfo kU3{.id = FormatId::u3, .name = "u3", .family = "uniform",
                     .mirrors = "TurboQuant values (vLLM turboquant presets), 3-bit",
                     .description = "per-token asymmetric uniform, fp16 scale + fp16 zero, 3 bits packed",
                     .for_keys = true, .for_values = true, .head_dim_multiple = 8, .head_dim_power_of_two = false,
                     .options = 0, .gpu = GpuStorage::rows, .make = &make_quantized_codec<UniformCodec<3>>};
const FormatInfo kU4{.id = FormatId::u4, .name = "u4", .family = "uniform",
                     .mirrors = "TurboQuant values (vLLM turboquant presets), 4-bit",
                     .description = "per-token asymmetric uniform, fp16 scale + fp16 zero, 4 bits",
                     .for_keys = true, .for_values = true, .head_dim_multiple = 2, .head_dim_power_of_two = false,
                     .options = 0, .gpu = GpuStorage::rows, .make = &make_quantized_codec<UniformCodec<4>>};
const FormatInfo kU8{.id = FormatId::u8, .name = "u8", .family = "uniform",
                     .mirrors = "TurboQuant-style per-token uniform values, 8-bit",
                     .description = "per-token asymmetric uniform, fp16 scale + fp16 zero, 8 bits",
                     .for_keys = true, .for_values = true, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                     .options = 0, .gpu = GpuStorage::rows, .make = &make_quantized_codec<UniformCodec<8>>};

}  // namespace

void append_uniform_formats(std::vector<const FormatInfo*>& out) {
  out.push_back(&kU2);
  out.push_back(&kU3);
  out.push_back(&kU4);
  out.push_back(&kU8);
}

}  // namespace kvgate::kernels
