#pragma once
// Model weights on the GPU stay in their stored GGUF type, as on the CPU (runtime/weights.h):
// the GEMV and GEMM kernels decode each element as they load it, with the element decoders of
// kernels/ggml_blocks.h, which the CPU runtime's block decode uses too.
// tests/runtime/gpu_weight_blocks_test.cc runs weight_element on the host and checks every
// element bit for bit against the CPU runtime's dequantize_weight_row, so the device multiplies
// by exactly the weights the CPU multiplies by (this header's dispatch and offsets included).
// No contraction into FMA happens because the GPU library builds with --fmad=false (nvcc) and
// -ffp-contract=off (HIP), as kernels/ does.
#include <cstddef>
#include <cstdint>

#include "core/float_convert.h"
#include "core/host_device.h"
#include "kernels/arithmetic.h"
#include "kernels/ggml_blocks.h"

namespace kvgate::kernels::gpu {

// The weight types the GPU forward multiplies with: the CPU runtime's (weight_type_supported).
enum class WeightType : uint8_t { f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q6_k };

// Elements and bytes per ggml block (1 element for the plain float types).
KVGATE_HD int weight_block_elems(WeightType t) {
  switch (t) {
    case WeightType::f32:
    case WeightType::f16:
    case WeightType::bf16: return 1;
    case WeightType::q4_k: return ggml::Q4_K::kElems;
    case WeightType::q6_k: return ggml::Q6_K::kElems;
    default: return ggml::kBlock;
  }
}
KVGATE_HD int weight_block_bytes(WeightType t) {
  switch (t) {
    case WeightType::f32: return 4;
    case WeightType::f16:
    case WeightType::bf16: return 2;
    case WeightType::q4_0: return ggml::Q4_0::kBytes;
    case WeightType::q4_1: return ggml::Q4_1::kBytes;
    case WeightType::q5_0: return ggml::Q5_0::kBytes;
    case WeightType::q5_1: return ggml::Q5_1::kBytes;
    case WeightType::q8_0: return ggml::Q8_0::kBytes;
    case WeightType::q4_k: return ggml::Q4_K::kBytes;
    case WeightType::q6_k: return ggml::Q6_K::kBytes;
  }
  return 0;
}

// How a weight of type t sits on the device (weight_planes.h): each ggml block split into its
// quant bytes, which go to a plane of 16-byte units, and the rest (scales, minima, high bits),
// which goes to a meta plane. ggml's 18-byte q4_0 blocks cannot be read with 128-bit loads; the
// planes can. The float types are their own quant plane (no meta). Q6_K's quants are also
// reordered there, so one unit holds every bit of the elements it decodes.
struct PlaneLayout {
  int quant_offset;  // where the quant bytes start in the ggml block (Q6_K: 0, they come first)
  int quant_bytes;   // a multiple of 16: the block's bytes in the quant plane
  int meta_bytes;    // the block's other bytes, in their ggml order, in the meta plane
};
KVGATE_HD PlaneLayout plane_layout(WeightType t) {
  switch (t) {
    case WeightType::f32:
    case WeightType::f16:
    case WeightType::bf16: return {0, weight_block_bytes(t), 0};
    case WeightType::q4_0: return {2, 16, 2};
    case WeightType::q4_1: return {4, 16, 4};
    case WeightType::q5_0: return {6, 16, 6};
    case WeightType::q5_1: return {8, 16, 8};
    case WeightType::q8_0: return {2, 32, 2};
    case WeightType::q4_k: return {16, 128, 16};
    case WeightType::q6_k: return {0, 192, 18};
  }
  return {0, 0, 0};
}

// Element i of a weight row stored as `t` (row: the row's first byte).
KVGATE_HD float weight_element(WeightType t, const uint8_t* row, int64_t i) {
  const int elems = weight_block_elems(t);
  const uint8_t* b = row + static_cast<size_t>(i / elems) * static_cast<size_t>(weight_block_bytes(t));
  const int j = static_cast<int>(i % elems);
  switch (t) {
    case WeightType::f32: return f32_from_bits(ggml::u32_at(b));
    case WeightType::f16: return ggml::half_at(b);
    case WeightType::bf16: return bf16_to_f32(static_cast<uint16_t>(ggml::u16_at(b)));
    case WeightType::q4_0: return ggml::Q4_0::element(b, j);
    case WeightType::q4_1: return ggml::Q4_1::element(b, j);
    case WeightType::q5_0: return ggml::Q5_0::element(b, j);
    case WeightType::q5_1: return ggml::Q5_1::element(b, j);
    case WeightType::q8_0: return ggml::Q8_0::element(b, j);
    case WeightType::q4_k: return ggml::Q4_K::element(b, j);
    case WeightType::q6_k: return ggml::Q6_K::element(b, j);
  }
  return 0.0f;
}

// The type llama.cpp's CPU mul_mat converts its input to before the dot with weights of type t
// (the vec_dot_type, ggml-cpu.c type_traits_cpu), as runtime/weights.cc maps the GGUF types:
// the GPU forward rounds its matmul inputs to it under @engine=llama.cpp (gpu_ops.h).
KVGATE_HD ggml::DotInput llama_cpp_dot_input(WeightType t) {
  switch (t) {
    case WeightType::f32: return ggml::DotInput::f32;
    case WeightType::f16: return ggml::DotInput::f16;
    case WeightType::bf16: return ggml::DotInput::bf16;
    case WeightType::q4_1:
    case WeightType::q5_1: return ggml::DotInput::q8_1;
    case WeightType::q4_0:
    case WeightType::q5_0:
    case WeightType::q8_0: return ggml::DotInput::q8_0;
    case WeightType::q4_k:
    case WeightType::q6_k: return ggml::DotInput::q8_k;
  }
  return ggml::DotInput::f32;
}

// What an engine rounds a matmul input to before it meets weights of type t (the forward rounds
// it so; runtime/weights.h round_matmul_input is the CPU's side): llama.cpp's CPU mul_mat
// converts to the dot type above; llama.cpp's CUDA cuBLAS path and vLLM multiply 16-bit
// activations with 16-bit weights (their GEMMs take f16/bf16 operands); exact keeps f32, and so do
// quantized weights under the CUDA engines (llama.cpp CUDA's MMQ rounding is not reproduced).
KVGATE_HD ggml::DotInput arithmetic_dot_input(Arithmetic a, WeightType t) {
  switch (a) {
    case Arithmetic::exact: return ggml::DotInput::f32;
    case Arithmetic::llama_cpp: return llama_cpp_dot_input(t);
    case Arithmetic::llama_cpp_cuda:
    case Arithmetic::vllm_fa3:
      return t == WeightType::f16 ? ggml::DotInput::f16 : t == WeightType::bf16 ? ggml::DotInput::bf16 : ggml::DotInput::f32;
  }
  return ggml::DotInput::f32;
}

}  // namespace kvgate::kernels::gpu
