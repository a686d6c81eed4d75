// Unquantized baselines: f32 (the exact oracle), f16 (what engines store by default), bf16.
// Arithmetic traits: llama.cpp's CPU flash attention converts the query to the key's own type
// (f16 or bf16; f32 stays f32); its CUDA vector kernel keeps it in f32 for f16/bf16 keys.
#include <cstring>

#include "core/float_convert.h"
#include "kernels/format_families.h"
#include "kernels/simd_avx2.h"

namespace kvgate::kernels {
namespace {

class F32Codec final : public Codec {
 public:
  using Codec::Codec;
  size_t group_bytes() const override { return sizeof(float) * head_dim_; }
  void quantize_ref(const float* x, uint8_t* dst) const override { std::memcpy(dst, x, group_bytes()); }
  void dequantize_ref(const uint8_t* src, float* y) const override { std::memcpy(y, src, group_bytes()); }
  float dot_ref(const float* q, const uint8_t* src, int) const override {
    const float* k = reinterpret_cast<const float*>(src);
    float sum = 0.0f;
    for (int i = 0; i < head_dim_; ++i) sum += q[i] * k[i];
    return sum;
  }
  void axpy_ref(float w, const uint8_t* src, int, float* acc) const override {
    const float* v = reinterpret_cast<const float*>(src);
    for (int i = 0; i < head_dim_; ++i) acc[i] += w * v[i];
  }
};

// f16 and bf16 differ only in the 16-bit conversion. The fused dot/axpy use the AVX2 paths in
// simd_avx2_float.cc (F16C conversion) when the CPU has them; f16 quantize/dequantize too (the
// hardware conversion rounds to nearest even, bit-identical to f32_to_f16/f16_to_f32).
template <uint16_t (*Encode)(float), float (*Decode)(uint16_t)>
class Half16Codec final : public Codec {
 public:
  Half16Codec(const FormatInfo& info, int head_dim, const FormatOptions& options)
      : Codec(info, head_dim, options), row_{info.id, head_dim, sizeof(uint16_t) * static_cast<size_t>(head_dim)} {}
  size_t group_bytes() const override { return sizeof(uint16_t) * head_dim_; }
  void quantize(const float* x, uint8_t* dst) const override {
    if (!simd::quantize_row(row_, x, dst)) quantize_ref(x, dst);
  }
  void dequantize(const uint8_t* src, float* y) const override {
    if (!simd::dequantize_row(row_, src, y)) dequantize_ref(src, y);
  }
  void dot_rows(const float* q, int n_q, const uint8_t* groups, int n_tokens, float* scores) const override {
    if (!simd::dot_rows(row_, q, n_q, groups, n_tokens, scores)) Codec::dot_rows(q, n_q, groups, n_tokens, scores);
  }
  void axpy_rows(const float* w, int n_q, const uint8_t* groups, int n_tokens, float* acc) const override {
    if (!simd::axpy_rows(row_, w, n_q, groups, n_tokens, acc)) Codec::axpy_rows(w, n_q, groups, n_tokens, acc);
  }
  void quantize_ref(const float* x, uint8_t* dst) const override {
    for (int i = 0; i < head_dim_; ++i) {
      uint16_t h = Encode(x[i]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
  }
  void dequantize_ref(const uint8_t* src, float* y) const override {
    for (int i = 0; i < head_dim_; ++i) y[i] = Decode(load(src, i));
  }
  float dot_ref(const float* q, const uint8_t* src, int) const override {
    float sum = 0.0f;
    for (int i = 0; i < head_dim_; ++i) sum += q[i] * Decode(load(src, i));
    return sum;
  }
  void axpy_ref(float w, const uint8_t* src, int, float* acc) const override {
    for (int i = 0; i < head_dim_; ++i) acc[i] += w * Decode(load(src, i));
  }

 private:
  static uint16_t load(const uint8_t* src, int i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    return h;
  }
  simd::RowFormat row_;
};

template <class C>
std::unique_ptr<Codec> make(const FormatInfo& info, int head_dim, const FormatOptions& options) {
  return std::make_unique<C>(info, head_dim, options);
}

using F16Codec = Half16Codec<f32_to_f16, f16_to_f32>;
using BF16Codec = Half16Codec<f32_to_bf16, bf16_to_f32>;

const FormatInfo kF32{.id = FormatId::f32, .name = "f32", .family = "float",
                      .mirrors = "exact oracle (no engine stores it)",
                      .description = "IEEE binary32, unquantized",
                      .for_keys = true, .for_values = true, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                      .options = 0, .gpu = GpuStorage::rows, .make = &make<F32Codec>,
                      .arithmetic = {.llama_cpp = QueryRounding::none, .llama_cpp_cuda = QueryRounding::none,
                                 .vllm_fa3 = QueryRounding::none}};
const FormatInfo kF16{.id = FormatId::f16, .name = "f16", .family = "float",
                      .mirrors = "vLLM/SGLang/llama.cpp default (auto, -ctk f16)",
                      .description = "IEEE binary16, round to nearest even",
                      .for_keys = true, .for_values = true, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                      .options = 0, .gpu = GpuStorage::rows, .make = &make<F16Codec>,
                      .arithmetic = {.llama_cpp = QueryRounding::f16, .llama_cpp_cuda = QueryRounding::none,
                                 .cuda_vector = true, .vllm_fa3 = QueryRounding::none}};
const FormatInfo kBF16{.id = FormatId::bf16, .name = "bf16", .family = "float",
                       .mirrors = "vLLM with a bf16 model (auto), llama.cpp -ctk bf16",
                       .description = "bfloat16, round to nearest even",
                       .for_keys = true, .for_values = true, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                       .options = 0, .gpu = GpuStorage::rows, .make = &make<BF16Codec>,
                       .arithmetic = {.llama_cpp = QueryRounding::bf16, .llama_cpp_cuda = QueryRounding::none,
                                  .cuda_vector = true, .vllm_fa3 = QueryRounding::none}};

}  // namespace

void append_float_formats(std::vector<const FormatInfo*>& out) {
  out.push_back(&kF32);
  out.push_back(&kF16);
  out.push_back(&kBF16);
}

}  // namespace kvgate::kernels
