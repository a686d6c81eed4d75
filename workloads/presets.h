#pragma once
// Model and GPU presets for the capacity planner. Numbers come from the models' published
// configs and the vendors' data sheets (dense bf16 rates, no sparsity); flags override them.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/kv_config.h"

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
  // Sliding-window attention (Gemma 2/3): layers flagged in layer_swa keep at most
  // sliding_window tokens of each sequence in the cache. Empty: every layer is global.
  int64_t sliding_window = 0;
  std::vector<bool> layer_swa;  // [n_layers]
};

// The part of `config`'s bytes per token (KvConfig::bytes_per_token) that the model's
// sliding-window layers hold; 0 for a model without them. Per-layer overrides keep their model
// layer numbers.
double window_bytes_per_token(const ModelShape& model, const kernels::KvConfig& config);
// K and V bytes one sequence of `context` tokens holds under `config`: global layers keep every
// token, sliding-window layers at most sliding_window of them.
double kv_bytes_for_context(const ModelShape& model, const kernels::KvConfig& config, int64_t context);

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
