// ggml's block formats as KV cache types: llama.cpp's (-ctk/-ctv q8_0, q5_0, q5_1, q4_0, q4_1,
// iq4_nl) and mxfp4. The blocks, their quantizers (ggml's quantize_row_*_ref operation for
// operation, the same arithmetic as ggml's CUDA copy kernels) and decoders are
// kernels/ggml_blocks.h's, which the GPU rows share, so bytes match what llama.cpp writes.
//
// Rotation: rows are stored as q(R x), the query is rotated once (prepare_query) and attention
// outputs are rotated back (finish_output). The llama.cpp cache types default to rot=wht, the
// plain blockwise Walsh-Hadamard llama.cpp applies to quantized caches since PR #21038
// (kernels/hadamard.h: BlockWalshHadamard); rot=hadamard is kvgate's randomized one; rot=none
// is llama.cpp with LLAMA_ATTN_ROT_DISABLE=1 (and llama.cpp before that PR).
//
// Arithmetic traits: the CPU flash attention converts the query to the type's vec_dot_type
// (ggml-cpu.c type_traits_cpu: q8_0 for q8_0, q5_0, q4_0, iq4_nl; q8_1 for q5_1, q4_1); the CUDA
// vector kernel quantizes it to q8_1 for every quantized key and has no iq4_nl instance.
//
// mxfp4 is OCP Microscaling FP4 as ggml stores it (block_mxfp4: an E8M0 exponent byte and 32
// E2M1 codes in 17 bytes, 4.25 bits). llama.cpp keeps gpt-oss weights in it but does not offer
// it as a -ctk/-ctv type; it is the MX point next to nvfp4 (E4M3 scales over 16 elements), the
// scheme SGLang's fp4_e2m1 KV cache uses with 16-element blocks.
#include "core/float_convert.h"
#include "kernels/format_families.h"
#include "kernels/ggml_blocks.h"
#include "kernels/quantized_codec.h"
#include "kernels/simd_avx2.h"

namespace kvgate::kernels {
namespace {

// T: the block's decoder and quantizer in kernels/ggml_blocks.h.
template <class T>
class GgmlCodec final : public QuantizedCodec {
 public:
  GgmlCodec(const FormatInfo& info, int head_dim, const FormatOptions& options)
      : QuantizedCodec(info, head_dim, options),
        blocks_(head_dim / T::kElems),
        row_{info.id, head_dim, static_cast<size_t>(head_dim / T::kElems) * T::kBytes, 1.0f} {}
  size_t group_bytes() const override { return static_cast<size_t>(blocks_) * T::kBytes; }

  void dot_rows(const float* q, int n_q, const uint8_t* groups, int n_tokens, float* scores) const override {
    if (!simd::dot_rows(row_, q, n_q, groups, n_tokens, scores))
      QuantizedCodec::dot_rows(q, n_q, groups, n_tokens, scores);
  }
  void axpy_rows(const float* w, int n_q, const uint8_t* groups, int n_tokens, float* acc) const override {
    if (!simd::axpy_rows(row_, w, n_q, groups, n_tokens, acc))
      QuantizedCodec::axpy_rows(w, n_q, groups, n_tokens, acc);
  }

 protected:
  void encode_row_ref(const float* x, uint8_t* dst) const override {
    for (int i = 0; i < blocks_; ++i) T::quantize(x + i * T::kElems, dst + i * T::kBytes);
  }
  void decode_row_ref(const uint8_t* src, float* y) const override {
    for (int i = 0; i < blocks_; ++i) T::dequantize(src + i * T::kBytes, y + i * T::kElems);
  }
  void encode_row(const float* x, uint8_t* dst) const override {
    if (!simd::quantize_row(row_, x, dst)) encode_row_ref(x, dst);
  }
  void decode_row(const uint8_t* src, float* y) const override {
    if (!simd::dequantize_row(row_, src, y)) decode_row_ref(src, y);
  }

 private:
  int blocks_;
  simd::RowFormat row_;
};

const FormatInfo kQ8_0{.id = FormatId::q8_0, .name = "q8_0", .family = "llama.cpp",
                       .mirrors = "llama.cpp -ctk/-ctv q8_0",
                       .description = "ggml block_q8_0: 32 x int8 + fp16 scale (8.5 bits)",
                       .for_keys = true, .for_values = true, .head_dim_multiple = 32, .head_dim_power_of_two = false,
                       .options = kOptionRotation | kOptionSeed, .gpu = GpuStorage::rows,
                       .make = &make_quantized_codec<GgmlCodec<ggml::Q8_0>>,
                       .default_rotation = Rotation::wht,
                       .arithmetic = {.llama_cpp = QueryRounding::q8_0, .llama_cpp_cuda = QueryRounding::q8_1_cuda,
                                  .cuda_vector = true, .ggml_quantized = true}};
const FormatInfo kQ5_0{.id = FormatId::q5_0, .name = "q5_0", .family = "llama.cpp",
                       .mirrors = "llama.cpp -ctk/-ctv q5_0",
                       .description = "ggml block_q5_0: 32 x 5-bit symmetric + fp16 scale (5.5 bits)",
                       .for_keys = true, .for_values = true, .head_dim_multiple = 32, .head_dim_power_of_two = false,
                       .options = kOptionRotation | kOptionSeed, .gpu = GpuStorage::rows,
                       .make = &make_quantized_codec<GgmlCodec<ggml::Q5_0>>,
                       .default_rotation = Rotation::wht,
                       .arithmetic = {.llama_cpp = QueryRounding::q8_0, .llama_cpp_cuda = QueryRounding::q8_1_cuda,
                                  .cuda_vector = true, .ggml_quantized = true}};
const FormatInfo kQ5_1{.id = FormatId::q5_1, .name = "q5_1", .family = "llama.cpp",
                       .mirrors = "llama.cpp -ctk/-ctv q5_1",
                       .description = "ggml block_q5_1: 32 x 5-bit + fp16 scale and min (6 bits)",
                       .for_keys = true, .for_values = true, .head_dim_multiple = 32, .head_dim_power_of_two = false,
                       .options = kOptionRotation | kOptionSeed, .gpu = GpuStorage::rows,
                       .make = &make_quantized_codec<GgmlCodec<ggml::Q5_1>>,
                       .default_rotation = Rotation::wht,
                       .arithmetic = {.llama_cpp = QueryRounding::q8_1, .llama_cpp_cuda = QueryRounding::q8_1_cuda,
                                  .cuda_vector = true, .ggml_quantized = true}};
const FormatInfo kQ4_0{.id = FormatId::q4_0, .name = "q4_0", .family = "llama.cpp",
                       .mirrors = "llama.cpp -ctk/-ctv q4_0",
                       .description = "ggml block_q4_0: 32 x 4-bit symmetric (-8 offset) + fp16 scale (4.5 bits)",
                       .for_keys = true, .for_values = true, .head_dim_multiple = 32, .head_dim_power_of_two = false,
                       .options = kOptionRotation | kOptionSeed, .gpu = GpuStorage::rows,
                       .make = &make_quantized_codec<GgmlCodec<ggml::Q4_0>>,
                       .default_rotation = Rotation::wht,
                       .arithmetic = {.llama_cpp = QueryRounding::q8_0, .llama_cpp_cuda = QueryRounding::q8_1_cuda,
                                  .cuda_vector = true, .ggml_quantized = true}};
const FormatInfo kQ4_1{.id = FormatId::q4_1, .name = "q4_1", .family = "llama.cpp",
                       .mirrors = "llama.cpp -ctk/-ctv q4_1",
                       .description = "ggml block_q4_1: 32 x 4-bit + fp16 scale and min (5 bits)",
                       .for_keys = true, .for_values = true, .head_dim_multiple = 32, .head_dim_power_of_two = false,
                       .options = kOptionRotation | kOptionSeed, .gpu = GpuStorage::rows,
                       .make = &make_quantized_codec<GgmlCodec<ggml::Q4_1>>,
                       .default_rotation = Rotation::wht,
                       .arithmetic = {.llama_cpp = QueryRounding::q8_1, .llama_cpp_cuda = QueryRounding::q8_1_cuda,
                                  .cuda_vector = true, .ggml_quantized = true}};
const FormatInfo kIQ4_NL{.id = FormatId::iq4_nl, .name = "iq4_nl", .family = "llama.cpp",
                         .mirrors = "llama.cpp -ctk/-ctv iq4_nl",
                         .description = "ggml block_iq4_nl: 32 x 4-bit non-linear grid + fp16 scale (4.5 bits)",
                         .for_keys = true, .for_values = true, .head_dim_multiple = 32, .head_dim_power_of_two = false,
                         .options = kOptionRotation | kOptionSeed, .gpu = GpuStorage::rows,
                         .make = &make_quantized_codec<GgmlCodec<ggml::IQ4_NL>>,
                       .default_rotation = Rotation::wht,
                       .arithmetic = {.llama_cpp = QueryRounding::q8_0, .llama_cpp_cuda = QueryRounding::q8_1_cuda,
                                  .cuda_vector = false, .ggml_quantized = true}};

const FormatInfo kMXFP4{.id = FormatId::mxfp4, .name = "mxfp4", .family = "mxfp4",
                       .mirrors = "ggml block_mxfp4 (OCP MX: E2M1 x32 + E8M0 scale); SGLang fp4_e2m1 uses 16-element blocks",
                       .description = "ggml block_mxfp4: 32 x E2M1 + power-of-two E8M0 scale (4.25 bits)",
                       .for_keys = true, .for_values = true, .head_dim_multiple = 32, .head_dim_power_of_two = false,
                       .options = kOptionRotation | kOptionSeed, .gpu = GpuStorage::rows,
                       .make = &make_quantized_codec<GgmlCodec<ggml::MXFP4>>};

}  // namespace

void append_ggml_formats(std::vector<const FormatInfo*>& out) {
  for (const FormatInfo* f : {&kQ8_0, &kQ5_0, &kQ5_1, &kQ4_0, &kQ4_1, &kIQ4_NL, &kMXFP4}) out.push_back(f);
}

}  // namespace kvgate::kernels
