#pragma once
// Model and GPU presets for the capacity planner. Numbers come from the models' published
// configs and the vendors' data sheets (dense bf16 rates, no sparsity); flags override them.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kvgate::workloads {

struct ModelShape {
  std::string name;
  int n_layers = 0;
  int n_heads = 0;     // query heads: attention FLOPs scale with these
  int n_kv_heads = 0;  // KV heads: cache bytes scale with these
  int head_dim = 0;
  int hidden = 0;
  double n_params = 0;  // total parameters, embeddings included
  std::string weight_dtype = "bf16";
  double weight_bytes = 0;  // n_params at weight_dtype, or what a GGUF file actually stores
};

struct GpuSpec {
  std::string name;
  double mem_bytes = 0;
  double bandwidth_bytes_per_s = 0;
  double bf16_flops_per_s = 0;
};

// Bits per weight of a stored weight type, block scales included: bf16/f16 16, fp8/int8 8,
// llama.cpp q8_0 8.5, q6_k 6.5625, q5_1 6, q5_0 5.5, q4_1 5, q4_0 and q4_k 4.5, int4 4.
// Unknown names are a usage error listing these.
double weight_bits_per_param(std::string_view dtype);

std::span<const ModelShape> model_presets();
std::span<const GpuSpec> gpu_presets();
// Case-insensitive lookups; unknown names are a usage error listing the presets.
ModelShape find_model_preset(std::string_view name, std::string_view weight_dtype = "bf16");
GpuSpec find_gpu_preset(std::string_view name);

}  // namespace kvgate::workloads
