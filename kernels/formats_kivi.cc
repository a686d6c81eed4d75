// KIVI (Liu et al., "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache", and its
// reference code jy-yuan/KIVI): keys have a few outlier *channels*, so they are quantized per
// channel across a group of tokens; values are quantized per token. Both are asymmetric
// (min and scale), with the fp16 min/scale used exactly as stored, so dequantization is
// code * scale + min.
//
//   kivi{b}_k  keys: a group of `group` tokens (default 32); per channel c: fp16 scale, fp16 min
//              over the group's tokens. Layout: scale[d] | min[d] | codes, token-major, each
//              token's d codes an LSB-first bit stream of b bits per channel.
//   kivi{b}_v  values: one token per group; per 32 consecutive channels (KIVI's group_size):
//              fp16 scale, fp16 min. Layout: (scale, min)[d/32] | d codes, LSB-first b bits.
//
// Both keep the newest `residual` tokens (default 128) in f16; Codec::residual_tokens() states
// the window and kv_format.h documents what the cache does with it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "kernels/format_families.h"
#include "kernels/simd_avx2.h"

namespace kvgate::kernels {
namespace {

constexpr int kDefaultKeyGroup = 32;
constexpr int kValueChannelGroup = 32;
constexpr float kF16Max = 65504.0f;

inline uint16_t to_f16(float v) { return f32_to_f16(std::clamp(v, -kF16Max, kF16Max)); }

inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

inline void store_f16(uint8_t* p, float v) {
  const uint16_t h = to_f16(v);
  std::memcpy(p, &h, 2);
}

inline uint32_t get_code(const uint8_t* codes, size_t index, int bits) {
  // bits is 2 or 4, so a code never straddles a byte.
  const size_t bit = index * bits;
  return (codes[bit >> 3] >> (bit & 7)) & ((1u << bits) - 1u);
}

inline void put_code(uint8_t* codes, size_t index, int bits, uint32_t code) {
  const size_t bit = index * bits;
  codes[bit >> 3] |= static_cast<uint8_t>(code << (bit & 7));
}

// Asymmetric range [lo, hi] -> fp16 (scale, min) as stored; the code for x uses the stored values.
struct Range {
  float scale;
  float min;
};

Range stored_range(float lo, float hi, int bits) {
  const float min = f16_to_f32(to_f16(lo));
  const float scale = f16_to_f32(to_f16((hi - min) / static_cast<float>((1 << bits) - 1)));
  return {scale, min};
}

uint32_t encode(float x, Range r, int bits) {
  if (!(r.scale > 0.0f)) return 0;
  const float q = std::nearbyint((x - r.min) / r.scale);
  const float top = static_cast<float>((1 << bits) - 1);
  return static_cast<uint32_t>(std::clamp(std::isnan(q) ? 0.0f : q, 0.0f, top));
}

// scores[qi * n + t] = q[qi] . rows[t] and acc[qi] += sum_t w[qi * n + t] * rows[t] over float
// rows, through the fused AVX2 kernels (one dispatch per call) or plainly without AVX2.
void dot_float_rows(int d, const float* q, int n_q, const float* rows, int n, float* scores) {
  const simd::RowFormat f{FormatId::f32, d, sizeof(float) * static_cast<size_t>(d)};
  if (simd::dot_rows(f, q, n_q, reinterpret_cast<const uint8_t*>(rows), n, scores)) return;
  for (int qi = 0; qi < n_q; ++qi)
    for (int t = 0; t < n; ++t)
      scores[static_cast<size_t>(qi) * n + t] =
          simd::dot_f32(q + static_cast<size_t>(qi) * d, rows + static_cast<size_t>(t) * d, d);
}

void axpy_float_rows(int d, const float* w, int n_q, const float* rows, int n, float* acc) {
  const simd::RowFormat f{FormatId::f32, d, sizeof(float) * static_cast<size_t>(d)};
  if (simd::axpy_rows(f, w, n_q, reinterpret_cast<const uint8_t*>(rows), n, acc)) return;
  for (int t = 0; t < n; ++t)
    for (int qi = 0; qi < n_q; ++qi)
      simd::axpy_f32(w[static_cast<size_t>(qi) * n + t], rows + static_cast<size_t>(t) * d,
                     acc + static_cast<size_t>(qi) * d, d);
}

// Per-thread scratch for a call's dequantized rows: attention calls the fused paths once per
// page run, so an allocation per call would sit on the hot path. Grows, never shrinks.
std::vector<float>& scratch_rows(size_t floats) {
  thread_local std::vector<float> rows;
  if (rows.size() < floats) rows.resize(floats);
  return rows;
}

void check_kivi_options(const FormatInfo& info, const FormatOptions& o) {
  const FormatOptions defaults{};
  if (o.scale != defaults.scale || o.rotation != Rotation::none || o.norm_correction ||
      o.outlier_channels != 0 || o.seed != defaults.seed)
    throw_usage_error("KV format " + std::string(info.name) + " takes only group/residual options");
  if (o.residual_tokens < 0) throw_usage_error("KV format " + std::string(info.name) + ": residual must be >= 0");
}

class KiviKeyCodec final : public Codec {
 public:
  KiviKeyCodec(const FormatInfo& info, int d, const FormatOptions& o, int bits)
      : Codec(info, d, o), bits_(bits), group_(o.token_group != 0 ? o.token_group : kDefaultKeyGroup) {
    check_kivi_options(info, o);
    if (group_ < 1 || group_ > 1024)
      throw_usage_error("KV format " + std::string(info.name) + ": group must be 1..1024 tokens");
  }

  int token_group() const override { return group_; }
  int residual_tokens() const override { return options_.residual_tokens; }
  size_t group_bytes() const override { return 4 * static_cast<size_t>(head_dim_) + codes_bytes(); }

  void quantize_ref(const float* x, uint8_t* dst) const override {
    std::memset(dst, 0, group_bytes());
    uint8_t* codes = dst + 4 * static_cast<size_t>(head_dim_);
    for (int c = 0; c < head_dim_; ++c) {
      float lo = x[c], hi = x[c];
      for (int t = 1; t < group_; ++t) {
        lo = std::min(lo, x[static_cast<size_t>(t) * head_dim_ + c]);
        hi = std::max(hi, x[static_cast<size_t>(t) * head_dim_ + c]);
      }
      const Range r = stored_range(lo, hi, bits_);
      store_f16(dst + 2 * c, r.scale);
      store_f16(dst + 2 * (head_dim_ + c), r.min);
      for (int t = 0; t < group_; ++t) {
        const size_t index = static_cast<size_t>(t) * head_dim_ + c;
        put_code(codes, index, bits_, encode(x[index], r, bits_));
      }
    }
  }

  void dequantize_ref(const uint8_t* src, float* y) const override {
    for (int t = 0; t < group_; ++t) decode_token(src, t, y + static_cast<size_t>(t) * head_dim_);
  }

  float dot_ref(const float* q, const uint8_t* src, int t) const override {
    const uint8_t* codes = src + 4 * static_cast<size_t>(head_dim_);
    float sum = 0.0f;
    for (int c = 0; c < head_dim_; ++c) {
      const float k = static_cast<float>(get_code(codes, static_cast<size_t>(t) * head_dim_ + c, bits_)) *
                          load_f16(src + 2 * c) +
                      load_f16(src + 2 * (head_dim_ + c));
      sum += q[c] * k;
    }
    return sum;
  }

  void axpy_ref(float w, const uint8_t* src, int t, float* acc) const override {
    float row[1024];
    decode_token(src, t, row);
    for (int c = 0; c < head_dim_; ++c) acc[c] += w * row[c];
  }

  // The call's keys are dequantized once into float rows (the fp16 scales and minima once per
  // group), then scored for every query row by the fused f32 kernel, so a prefill chunk or a
  // GQA group pays the bit unpacking once.
  void dot_rows(const float* q, int n_q, const uint8_t* groups, int n_tokens, float* scores) const override {
    std::vector<float>& keys = scratch_rows(static_cast<size_t>(n_tokens) * head_dim_);
    float scale[1024], min[1024];
    for (int g0 = 0; g0 < n_tokens; g0 += group_) {
      const uint8_t* src = groups + static_cast<size_t>(g0 / group_) * group_bytes();
      for (int c = 0; c < head_dim_; ++c) {
        scale[c] = load_f16(src + 2 * c);
        min[c] = load_f16(src + 2 * (head_dim_ + c));
      }
      const uint8_t* codes = src + 4 * static_cast<size_t>(head_dim_);
      for (int t = 0; t < group_ && g0 + t < n_tokens; ++t) {
        float* key = keys.data() + static_cast<size_t>(g0 + t) * head_dim_;
        for (int c = 0; c < head_dim_; ++c)
          key[c] = static_cast<float>(get_code(codes, static_cast<size_t>(t) * head_dim_ + c, bits_)) * scale[c] + min[c];
      }
    }
    dot_float_rows(head_dim_, q, n_q, keys.data(), n_tokens, scores);
  }

 private:
  size_t codes_bytes() const { return (static_cast<size_t>(group_) * head_dim_ * bits_ + 7) / 8; }
  void decode_token(const uint8_t* src, int t, float* y) const {
    const uint8_t* codes = src + 4 * static_cast<size_t>(head_dim_);
    for (int c = 0; c < head_dim_; ++c)
      y[c] = static_cast<float>(get_code(codes, static_cast<size_t>(t) * head_dim_ + c, bits_)) *
                 load_f16(src + 2 * c) +
             load_f16(src + 2 * (head_dim_ + c));
  }

  int bits_;
  int group_;
};

class KiviValueCodec final : public Codec {
 public:
  KiviValueCodec(const FormatInfo& info, int d, const FormatOptions& o, int bits) : Codec(info, d, o), bits_(bits) {
    check_kivi_options(info, o);
    if (o.token_group != 0)
      throw_usage_error("KV format " + std::string(info.name) +
                        ": group= sets the token group of KIVI keys; values are quantized per token");
  }

  int residual_tokens() const override { return options_.residual_tokens; }
  size_t group_bytes() const override { return 4 * n_channel_groups() + codes_bytes(); }

  void quantize_ref(const float* x, uint8_t* dst) const override {
    std::memset(dst, 0, group_bytes());
    uint8_t* codes = dst + 4 * n_channel_groups();
    for (size_t g = 0; g < n_channel_groups(); ++g) {
      const float* part = x + g * kValueChannelGroup;
      const auto [lo, hi] = std::minmax_element(part, part + kValueChannelGroup);
      const Range r = stored_range(*lo, *hi, bits_);
      store_f16(dst + 4 * g, r.scale);
      store_f16(dst + 4 * g + 2, r.min);
      for (int c = 0; c < kValueChannelGroup; ++c)
        put_code(codes, g * kValueChannelGroup + c, bits_, encode(part[c], r, bits_));
    }
  }

  void dequantize_ref(const uint8_t* src, float* y) const override {
    const uint8_t* codes = src + 4 * n_channel_groups();
    for (size_t g = 0; g < n_channel_groups(); ++g) {
      const float scale = load_f16(src + 4 * g), min = load_f16(src + 4 * g + 2);
      for (int c = 0; c < kValueChannelGroup; ++c) {
        const size_t i = g * kValueChannelGroup + c;
        y[i] = static_cast<float>(get_code(codes, i, bits_)) * scale + min;
      }
    }
  }

  float dot_ref(const float* q, const uint8_t* src, int) const override {
    float row[1024];
    dequantize_ref(src, row);
    float sum = 0.0f;
    for (int c = 0; c < head_dim_; ++c) sum += q[c] * row[c];
    return sum;
  }

  void axpy_ref(float w, const uint8_t* src, int, float* acc) const override {
    float row[1024];
    dequantize_ref(src, row);
    for (int c = 0; c < head_dim_; ++c) acc[c] += w * row[c];
  }

  // One dequantization per token for all query rows of the call (see the key codec).
  void dot_rows(const float* q, int n_q, const uint8_t* groups, int n_tokens, float* scores) const override {
    const std::vector<float>& rows = dequantize_all(groups, n_tokens);
    dot_float_rows(head_dim_, q, n_q, rows.data(), n_tokens, scores);
  }

  void axpy_rows(const float* weights, int n_q, const uint8_t* groups, int n_tokens, float* acc) const override {
    const std::vector<float>& rows = dequantize_all(groups, n_tokens);
    axpy_float_rows(head_dim_, weights, n_q, rows.data(), n_tokens, acc);
  }

 private:
  const std::vector<float>& dequantize_all(const uint8_t* groups, int n_tokens) const {
    std::vector<float>& rows = scratch_rows(static_cast<size_t>(n_tokens) * head_dim_);
    for (int t = 0; t < n_tokens; ++t)
      dequantize_ref(groups + static_cast<size_t>(t) * group_bytes(), rows.data() + static_cast<size_t>(t) * head_dim_);
    return rows;
  }
  size_t n_channel_groups() const { return static_cast<size_t>(head_dim_) / kValueChannelGroup; }
  size_t codes_bytes() const { return (static_cast<size_t>(head_dim_) * bits_ + 7) / 8; }
  int bits_;
};

template <int Bits>
std::unique_ptr<Codec> make_key(const FormatInfo& info, int d, const FormatOptions& o) {
  return std::make_unique<KiviKeyCodec>(info, d, o, Bits);
}
template <int Bits>
std::unique_ptr<Codec> make_value(const FormatInfo& info, int d, const FormatOptions& o) {
  return std::make_unique<KiviValueCodec>(info, d, o, Bits);
}

constexpr std::string_view kMirrors = "KIVI reference code (jy-yuan/KIVI); HF transformers QuantizedCache";

// Keys and values take both options; a value codec rejects group= with a message that says why.
constexpr uint32_t kKiviOptions = kOptionTokenGroup | kOptionResidual;

const FormatInfo kKivi2K{.id = FormatId::kivi2_k, .name = "kivi2_k", .family = "kivi",
                         .mirrors = kMirrors,
                         .description = "keys: 2-bit per-channel over 32-token groups, fp16 scale+min, f16 residual window",
                         .for_keys = true, .for_values = false, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                         .options = kKiviOptions, .gpu = GpuStorage::windowed, .make = &make_key<2>};
const FormatInfo kKivi2V{.id = FormatId::kivi2_v, .name = "kivi2_v", .family = "kivi",
                         .mirrors = kMirrors,
                         .description = "values: 2-bit per-token, 32-channel groups, fp16 scale+min, f16 residual window",
                         .for_keys = false, .for_values = true,
                         .head_dim_multiple = kValueChannelGroup, .head_dim_power_of_two = false,
                         .options = kKiviOptions, .gpu = GpuStorage::windowed, .make = &make_value<2>};
const FormatInfo kKivi4K{.id = FormatId::kivi4_k, .name = "kivi4_k", .family = "kivi",
                         .mirrors = kMirrors,
                         .description = "keys: 4-bit per-channel over 32-token groups, fp16 scale+min, f16 residual window",
                         .for_keys = true, .for_values = false, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                         .options = kKiviOptions, .gpu = GpuStorage::windowed, .make = &make_key<4>};
const FormatInfo kKivi4V{.id = FormatId::kivi4_v, .name = "kivi4_v", .family = "kivi",
                         .mirrors = kMirrors,
                         .description = "values: 4-bit per-token, 32-channel groups, fp16 scale+min, f16 residual window",
                         .for_keys = false, .for_values = true,
                         .head_dim_multiple = kValueChannelGroup, .head_dim_power_of_two = false,
                         .options = kKiviOptions, .gpu = GpuStorage::windowed, .make = &make_value<4>};

}  // namespace

void append_kivi_formats(std::vector<const FormatInfo*>& out) {
  for (const FormatInfo* f : {&kKivi2K, &kKivi2V, &kKivi4K, &kKivi4V}) out.push_back(f);
}

}  // namespace kvgate::kernels
