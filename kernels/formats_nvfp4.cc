// NVFP4 (NVIDIA Blackwell's 4-bit float): E2M1 elements {0, 0.5, 1, 1.5, 2, 3, 4, 6} in
// 16-element blocks, each with an FP8 E4M3 block scale, plus NVIDIA's per-tensor f32 global
// scale. Our global scale is FormatOptions::scale (g, default 1.0, i.e. no global scaling):
//   block code  s_b = e4m3(amax_b / 6 / g)        (saturating at 448)
//   element     c_i = e2m1(x_i / (e4m3(s_b) * g))  (round to nearest even, saturating at 6)
//   value       x_i ~ e2m1(c_i) * e4m3(s_b) * g
// With a calibrated g = amax_tensor / (6 * 448) this is NVIDIA's recipe (TensorRT-LLM / ModelOpt
// NVFP4 KV cache); the default g = 1 covers block maxima from ~0.012 to 2688 without calibration.
// Layout per token: head_dim/16 blocks of 9 bytes = [e4m3 scale][8 bytes: element 2i in the low
// nibble, 2i+1 in the high nibble, as __nv_fp4x2 packs]; 4.5 bits per element.
// NaN inputs encode as +-6 (the comparisons below all fail); an all-zero block stores scale 0.
//
// nvfp4_4over6 is vLLM's --kv-cache-dtype of that name (NVFP4KVScaleSearch::FOUR_OVER_SIX in
// vLLM's NVFP4 KV store kernel): the same layout, but each block tries the scale amax/4 as well
// as amax/6 and keeps amax/4 when its squared reconstruction error is strictly smaller.
//
// fp4_mx_block16 is SGLang's --kv-cache-dtype of that name (FP4MXBlock16KVQuantizeUtil in
// python/sglang/srt/layers/quantization/kvfp4_tensor.py:49-140, SGLang 0.5.23): E2M1 elements in
// 16-element blocks, each with a power-of-two scale kept as a biased exponent byte, no global
// scale. Per block, in f32 as its @torch.compile'd quantizer computes on bf16 K and V:
//   e     = ceil(log2f(max(amax / 6, 1e-10)))           byte e + 127 (94 for an all-zero block)
//   c_i   = #{b in {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5} : |x_i / 2^e| >= b}, sign bit 8 when
//           x_i / 2^e < 0 (so a tie rounds up, away from zero: 0.25 -> 0.5, 2.5 -> 3; not nvfp4's
//           round-to-nearest-even)
//   value x_i ~ e2m1(c_i) * 2^e
// Layout per token: head_dim/16 blocks of 9 bytes = [e + 127][8 bytes: element 2i in the low
// nibble, 2i+1 in the high nibble, as SGLang packs them]; 4.5 bits per element. log2f is taken
// correctly rounded (from a double); an engine log2f may differ by an ulp for the few amax/6
// within an ulp of 2^k * (1 + 2^-24 k), where e can then differ by one. A NaN in a block is left
// out of its amax (SGLang's byte is then undefined) and encodes as 0.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/float_convert.h"
#include "kernels/format_families.h"
#include "kernels/quantized_codec.h"
#include "kernels/simd_avx2.h"

namespace kvgate::kernels {
namespace {

constexpr int kNvfp4Block = 16;
constexpr int kNvfp4BlockBytes = 1 + kNvfp4Block / 2;
constexpr float kE2m1Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Round to nearest, ties to the even code (0.25->0, 0.75->1.0, 1.25->1.0, 1.75->2, 2.5->2,
// 3.5->4, 5->4), values >= 6 saturate to 6.
uint8_t e2m1_code(float v) {
  const float a = std::fabs(v);
  uint8_t code;
  if (a <= 0.25f) code = 0;
  else if (a < 0.75f) code = 1;
  else if (a <= 1.25f) code = 2;
  else if (a < 1.75f) code = 3;
  else if (a <= 2.5f) code = 4;
  else if (a < 3.5f) code = 5;
  else if (a <= 5.0f) code = 6;
  else code = 7;
  return static_cast<uint8_t>(code | (std::signbit(v) ? 0x8 : 0x0));
}
float e2m1_value(uint8_t code) {
  const float v = kE2m1Values[code & 0x7];
  return (code & 0x8) ? -v : v;
}

// The block code and scale for the candidate amax / divisor.
struct BlockScale {
  uint8_t code;
  float scale;  // e4m3(code) * g
};
BlockScale block_scale_for(float amax, float divisor, float g) {
  const uint8_t code = f32_to_fp8(amax / divisor / g, Fp8Kind::e4m3fn);
  return {code, fp8_to_f32(code, Fp8Kind::e4m3fn) * g};
}
uint8_t element_code(float x, float block_scale) { return block_scale == 0.0f ? 0 : e2m1_code(x / block_scale); }

// Sum of squared errors of a block stored with this scale, each value as decode_row_ref gives it.
float block_error(const float* x, BlockScale s, float g) {
  const float stored = fp8_to_f32(s.code, Fp8Kind::e4m3fn);
  float error = 0.0f;
  for (int j = 0; j < kNvfp4Block; ++j) {
    const float d = e2m1_value(element_code(x[j], s.scale)) * stored * g - x[j];
    error += d * d;
  }
  return error;
}

template <bool kFourOverSix>
class Nvfp4Codec final : public QuantizedCodec {
 public:
  Nvfp4Codec(const FormatInfo& info, int head_dim, const FormatOptions& options)
      : QuantizedCodec(info, head_dim, options) {
    if (!(options.scale > 0.0f) || !std::isfinite(options.scale))
      throw_usage_error("KV format " + std::string(info.name) + ": global scale must be a positive finite number, got " +
                        std::to_string(options.scale));
  }
  size_t group_bytes() const override { return static_cast<size_t>(head_dim_ / kNvfp4Block) * kNvfp4BlockBytes; }
  void dot_rows(const float* q, int n_q, const uint8_t* groups, int n_tokens, float* scores) const override {
    if (!simd::dot_rows(row(), q, n_q, groups, n_tokens, scores))
      QuantizedCodec::dot_rows(q, n_q, groups, n_tokens, scores);
  }
  void axpy_rows(const float* w, int n_q, const uint8_t* groups, int n_tokens, float* acc) const override {
    if (!simd::axpy_rows(row(), w, n_q, groups, n_tokens, acc)) QuantizedCodec::axpy_rows(w, n_q, groups, n_tokens, acc);
  }

 protected:
  void encode_row_ref(const float* x, uint8_t* dst) const override {
    const float g = options_.scale;
    for (int b = 0; b < head_dim_ / kNvfp4Block; ++b, x += kNvfp4Block, dst += kNvfp4BlockBytes) {
      float amax = 0.0f;
      for (int j = 0; j < kNvfp4Block; ++j) amax = std::fmax(amax, std::fabs(x[j]));
      BlockScale s = block_scale_for(amax, 6.0f, g);
      if (kFourOverSix) {
        const BlockScale four = block_scale_for(amax, 4.0f, g);
        if (block_error(x, four, g) < block_error(x, s, g)) s = four;
      }
      dst[0] = s.code;
      for (int j = 0; j < kNvfp4Block; j += 2)
        dst[1 + j / 2] = static_cast<uint8_t>(element_code(x[j], s.scale) | (element_code(x[j + 1], s.scale) << 4));
    }
  }
 private:
  simd::RowFormat row() const { return {info_->id, head_dim_, group_bytes(), options_.scale}; }

 protected:
  void decode_row_ref(const uint8_t* src, float* y) const override {
    const float g = options_.scale;
    for (int b = 0; b < head_dim_ / kNvfp4Block; ++b, y += kNvfp4Block, src += kNvfp4BlockBytes) {
      const float s = fp8_to_f32(src[0], Fp8Kind::e4m3fn);
      for (int j = 0; j < kNvfp4Block; j += 2) {
        y[j] = e2m1_value(src[1 + j / 2] & 0x0f) * s * g;
        y[j + 1] = e2m1_value(src[1 + j / 2] >> 4) * s * g;
      }
    }
  }
};

constexpr float kMxBounds[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};

// e = ceil(log2f(y)) for y > 0: the double log2 rounded to float first, as a float log2 returns
// it, so a y just above 2^k whose log2 rounds to k gives k.
int ceil_log2f(float y) { return static_cast<int>(std::ceil(static_cast<float>(std::log2(static_cast<double>(y))))); }

class Fp4MxBlock16Codec final : public QuantizedCodec {
 public:
  using QuantizedCodec::QuantizedCodec;
  size_t group_bytes() const override { return static_cast<size_t>(head_dim_ / kNvfp4Block) * kNvfp4BlockBytes; }

 protected:
  void encode_row_ref(const float* x, uint8_t* dst) const override {
    for (int b = 0; b < head_dim_ / kNvfp4Block; ++b, x += kNvfp4Block, dst += kNvfp4BlockBytes) {
      float amax = 0.0f;
      for (int j = 0; j < kNvfp4Block; ++j) amax = std::fmax(amax, std::fabs(x[j]));
      const int e = std::min(ceil_log2f(std::fmax(amax / 6.0f, 1e-10f)), 127);
      dst[0] = static_cast<uint8_t>(e + 127);
      const float scale = std::ldexp(1.0f, e);
      uint8_t codes[kNvfp4Block];
      for (int j = 0; j < kNvfp4Block; ++j) {
        const float v = x[j] / scale;
        uint8_t c = 0;
        for (float bound : kMxBounds) c = static_cast<uint8_t>(c + (std::fabs(v) >= bound ? 1 : 0));
        codes[j] = static_cast<uint8_t>(c | (v < 0.0f ? 0x8 : 0x0));
      }
      for (int j = 0; j < kNvfp4Block; j += 2) dst[1 + j / 2] = static_cast<uint8_t>(codes[j] | (codes[j + 1] << 4));
    }
  }
  void decode_row_ref(const uint8_t* src, float* y) const override {
    for (int b = 0; b < head_dim_ / kNvfp4Block; ++b, y += kNvfp4Block, src += kNvfp4BlockBytes) {
      const float scale = std::ldexp(1.0f, static_cast<int>(src[0]) - 127);
      for (int j = 0; j < kNvfp4Block; j += 2) {
        y[j] = e2m1_value(src[1 + j / 2] & 0x0f) * scale;
        y[j + 1] = e2m1_value(src[1 + j / 2] >> 4) * scale;
      }
    }
  }
};

const FormatInfo kNvfp4{.id = FormatId::nvfp4, .name = "nvfp4", .family = "nvfp4",
                        .mirrors = "TensorRT-LLM/ModelOpt NVFP4 KV cache (Blackwell)",
                        .description = "E2M1 x16 + E4M3 block scale, per-tensor f32 global scale (scale=, default 1), 4.5 bits",
                        .for_keys = true, .for_values = true,
                        .head_dim_multiple = kNvfp4Block, .head_dim_power_of_two = false,
                        .options = kOptionScale, .gpu = GpuStorage::rows,
                        .make = &make_quantized_codec<Nvfp4Codec<false>>};
const FormatInfo kNvfp4FourOverSix{
    .id = FormatId::nvfp4_4over6, .name = "nvfp4_4over6", .family = "nvfp4",
    .mirrors = "vLLM --kv-cache-dtype nvfp4_4over6",
    .description = "nvfp4 whose block scale is amax/6 or amax/4, whichever reconstructs the block better, 4.5 bits",
    .for_keys = true, .for_values = true,
    .head_dim_multiple = kNvfp4Block, .head_dim_power_of_two = false,
    .options = kOptionScale, .gpu = GpuStorage::rows, .make = &make_quantized_codec<Nvfp4Codec<true>>};

const FormatInfo kFp4MxBlock16{
    .id = FormatId::fp4_mx_block16, .name = "fp4_mx_block16", .family = "nvfp4",
    .mirrors = "SGLang --kv-cache-dtype fp4_mx_block16",
    .description = "E2M1 x16 + power-of-two block scale (exponent byte), ties away from zero, 4.5 bits",
    .for_keys = true, .for_values = true,
    .head_dim_multiple = kNvfp4Block, .head_dim_power_of_two = false,
    .options = 0, .gpu = GpuStorage::none, .make = &make_quantized_codec<Fp4MxBlock16Codec>};

}  // namespace

void append_nvfp4_formats(std::vector<const FormatInfo*>& out) {
  out.push_back(&kNvfp4);
  out.push_back(&kNvfp4FourOverSix);
  out.push_back(&kFp4MxBlock16);
}

}  // namespace kvgate::kernels
