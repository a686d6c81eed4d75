#include "workloads/presets.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "core/error.h"
#include "kernels/kv_format.h"

namespace kvgate::workloads {
namespace {

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

struct WeightType {
  std::string_view name;
  double bits;
};
constexpr WeightType kWeightTypes[] = {
    {"f32", 32}, {"bf16", 16}, {"f16", 16},   {"fp8", 8},      {"int8", 8},  {"q8_0", 8.5}, {"q6_k", 6.5625},
    {"q5_1", 6}, {"q5_0", 5.5}, {"q4_1", 5}, {"q4_k", 4.5}, {"q4_0", 4.5}, {"int4", 4},
};

ModelShape model(std::string name, int layers, int heads, int kv_heads, int head_dim, int hidden, double params) {
  ModelShape m;
  m.name = std::move(name);
  m.n_layers = layers;
  m.n_heads = heads;
  m.n_kv_heads = kv_heads;
  m.head_dim = head_dim;
  m.hidden = hidden;
  m.n_params = params;
  m.weight_bytes = params * 2.0;
  return m;
}

// Gemma 3: every sixth layer global, the others a sliding window (llama.cpp's pattern 6).
ModelShape gemma3(std::string name, int layers, int heads, int kv_heads, int head_dim, int hidden, double params,
                  int64_t window) {
  ModelShape m = model(std::move(name), layers, heads, kv_heads, head_dim, hidden, params);
  m.sliding_window = window;
  for (int l = 0; l < layers; ++l) m.layer_swa.push_back(l % 6 < 5);
  return m;
}

const std::vector<ModelShape>& models() {
  // From each model's config.json on the Hugging Face hub; parameter counts from the model cards.
  static const std::vector<ModelShape> table = {
      model("Llama-3.1-8B", 32, 32, 8, 128, 4096, 8.03e9),
      model("Llama-3.1-70B", 80, 64, 8, 128, 8192, 70.6e9),
      model("Qwen2.5-7B", 28, 28, 4, 128, 3584, 7.62e9),
      model("Mistral-7B", 32, 32, 8, 128, 4096, 7.25e9),
      model("SmolLM2-135M", 30, 9, 3, 64, 576, 134.5e6),
      gemma3("Gemma-3-270M", 18, 4, 1, 256, 640, 268e6, 512),
      gemma3("Gemma-3-4B", 34, 8, 4, 256, 2560, 4.3e9, 1024),
      gemma3("Gemma-3-27B", 62, 32, 16, 128, 5376, 27.4e9, 1024),
  };
  return table;
}

GpuSpec gpu(std::string name, double mem_gb, double bw_gbs, double tflops) {
  return GpuSpec{std::move(name), mem_gb * 1e9, bw_gbs * 1e9, tflops * 1e12};
}

const std::vector<GpuSpec>& gpus() {
  // Data-sheet memory (GB), HBM bandwidth and dense bf16 tensor throughput.
  static const std::vector<GpuSpec> table = {
      gpu("H100", 80, 3350, 989),
      gpu("H200", 141, 4800, 989),
      gpu("MI300X", 192, 5300, 1307),
      gpu("MI355X", 288, 8000, 2500),
  };
  return table;
}

template <class T>
std::string names_of(const std::vector<T>& table) {
  std::string out;
  for (const T& t : table) out += (out.empty() ? "" : ", ") + t.name;
  return out;
}

}  // namespace

double weight_bits_per_param(std::string_view dtype) {
  for (const WeightType& w : kWeightTypes)
    if (same_name(w.name, dtype)) return w.bits;
  std::string names;
  for (const WeightType& w : kWeightTypes) names += (names.empty() ? "" : ", ") + std::string(w.name);
  throw_usage_error("unknown weight dtype '" + echo_user_text(dtype) + "'; valid: " + names);
}

std::span<const ModelShape> model_presets() { return models(); }

double window_bytes_per_token(const ModelShape& model, const kernels::KvConfig& config) {
  double total = 0;
  for (int layer = 0; layer < model.n_layers && layer < static_cast<int>(model.layer_swa.size()); ++layer) {
    if (!model.layer_swa[static_cast<size_t>(layer)]) continue;
    for (const kernels::FormatSpec& f :
         {config.key_for_layer(layer, model.n_layers), config.value_for_layer(layer, model.n_layers)})
      total += kernels::make_codec(*f.format, model.head_dim, f.options)->bytes_per_token() * model.n_kv_heads;
  }
  return total;
}

double kv_bytes_for_context(const ModelShape& model, const kernels::KvConfig& config, int64_t context) {
  const double all = config.bytes_per_token(kernels::KvShape{model.n_layers, model.n_kv_heads, model.head_dim});
  const double local = window_bytes_per_token(model, config);
  const int64_t window = model.sliding_window > 0 ? std::min(context, model.sliding_window) : context;
  return (all - local) * static_cast<double>(context) + local * static_cast<double>(window);
}
std::span<const GpuSpec> gpu_presets() { return gpus(); }

ModelShape find_model_preset(std::string_view name, std::string_view weight_dtype) {
  const double bits = weight_bits_per_param(weight_dtype);
  for (const ModelShape& m : models())
    if (same_name(m.name, name)) {
      ModelShape out = m;
      out.weight_dtype = std::string(weight_dtype);
      out.weight_bytes = m.n_params * bits / 8.0;
      return out;
    }
  throw_usage_error("unknown model '" + echo_user_text(name) + "'; presets: " + names_of(models()) +
                    " (or a path to a .gguf file)");
}

GpuSpec find_gpu_preset(std::string_view name) {
  for (const GpuSpec& g : gpus())
    if (same_name(g.name, name)) return g;
  throw_usage_error("unknown GPU '" + echo_user_text(name) + "'; presets: " + names_of(gpus()));
}

}  // namespace kvgate::workloads
