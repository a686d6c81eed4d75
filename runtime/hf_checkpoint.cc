#include "runtime/hf_checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <numbers>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/hf_tokenizer.h"

namespace kvgate::runtime {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kSupportedTypes = "llama, mistral, qwen2, qwen3, gemma3_text";

// The architectures: config.json model_type, its transformers class, the runtime's architecture.
struct HfArch {
  const char* model_type;
  const char* class_name;
  const char* runtime_arch;
};
constexpr HfArch kArchs[] = {
    {"llama", "LlamaForCausalLM", "llama"},
    {"mistral", "MistralForCausalLM", "llama"},
    {"qwen2", "Qwen2ForCausalLM", "qwen2"},
    {"qwen3", "Qwen3ForCausalLM", "qwen3"},
    {"gemma3_text", "Gemma3ForCausalLM", "gemma3"},
};

// Hugging Face tensor names and the runtime's. `gemma`: 1 only for Gemma, 0 only for the others,
// -1 for all (Gemma's post_attention_layernorm is a sandwich norm, Llama's the FFN's input norm).
struct NameRule {
  const char* hf;
  const char* runtime;
  int gemma;
};
constexpr NameRule kGlobalNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight", -1},
    {"model.norm.weight", "output_norm.weight", -1},
    {"lm_head.weight", "output.weight", -1},
};
constexpr NameRule kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight", -1},
    {"self_attn.q_proj.weight", "attn_q.weight", -1},
    {"self_attn.k_proj.weight", "attn_k.weight", -1},
    {"self_attn.v_proj.weight", "attn_v.weight", -1},
    {"self_attn.o_proj.weight", "attn_output.weight", -1},
    {"self_attn.q_proj.bias", "attn_q.bias", -1},
    {"self_attn.k_proj.bias", "attn_k.bias", -1},
    {"self_attn.v_proj.bias", "attn_v.bias", -1},
    {"self_attn.o_proj.bias", "attn_output.bias", -1},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", -1},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", -1},
    {"post_attention_layernorm.weight", "ffn_norm.weight", 0},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", 1},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight", 1},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight", 1},
    {"mlp.gate_proj.weight", "ffn_gate.weight", -1},
    {"mlp.up_proj.weight", "ffn_up.weight", -1},
    {"mlp.down_proj.weight", "ffn_down.weight", -1},
    {"mlp.gate_proj.bias", "ffn_gate.bias", -1},
    {"mlp.up_proj.bias", "ffn_up.bias", -1},
    {"mlp.down_proj.bias", "ffn_down.bias", -1},
};

bool rule_applies(const NameRule& r, bool gemma) { return r.gemma < 0 || (r.gemma == 1) == gemma; }

// "model.layers.N.SUFFIX" -> (N, SUFFIX).
bool split_layer_name(std::string_view name, std::string_view prefix, uint32_t& layer, std::string_view& suffix) {
  if (!name.starts_with(prefix)) return false;
  name.remove_prefix(prefix.size());
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot > 6) return false;
  uint32_t n = 0;
  for (char c : name.substr(0, dot)) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<uint32_t>(c - '0');
  }
  layer = n;
  suffix = name.substr(dot + 1);
  return true;
}

std::string runtime_tensor_name(const std::string& hf, bool gemma, uint32_t n_layers) {
  for (const NameRule& r : kGlobalNames)
    if (hf == r.hf) return r.runtime;
  uint32_t layer = 0;
  std::string_view suffix;
  if (!split_layer_name(hf, "model.layers.", layer, suffix) || layer >= n_layers) return "";
  for (const NameRule& r : kLayerNames)
    if (rule_applies(r, gemma) && suffix == r.hf) return "blk." + std::to_string(layer) + "." + r.runtime;
  return "";
}

Json read_json_file(const fs::path& p) { return read_hf_json(p.string()); }

// config.json's keys, read by name; what is left unread at the end is checked against the keys
// known not to change the forward pass.
class Config {
 public:
  Config(Json j, std::string file) : j_(std::move(j)), file_(std::move(file)) {
    if (!j_.is_object()) throw_input_error(file_ + ": not a JSON object");
  }
  const std::string& file() const { return file_; }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const Json* get(const std::string& key) {
    read_.insert(key);
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    throw_input_error(file_ + ": " + key + ": " + problem);
  }
  uint32_t u32(const std::string& key, std::optional<uint32_t> fallback = std::nullopt) {
    const Json* v = get(key);
    if (!v) {
      if (!fallback) fail(key, "missing");
      return *fallback;
    }
    if (!v->is_number_unsigned() || v->get<uint64_t>() == 0 || v->get<uint64_t>() > (1u << 30))
      fail(key, "must be a whole number from 1 to 2^30, got " + echo_user_text(v->dump()));
    return v->get<uint32_t>();
  }
  double number(const std::string& key, double fallback) {
    const Json* v = get(key);
    if (!v) return fallback;
    if (!v->is_number() || !std::isfinite(v->get<double>())) fail(key, "must be a number, got " + echo_user_text(v->dump()));
    return v->get<double>();
  }
  bool boolean(const std::string& key, bool fallback) {
    const Json* v = get(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "must be true or false, got " + echo_user_text(v->dump()));
    return v->get<bool>();
  }
  std::string string(const std::string& key, const std::string& fallback) {
    const Json* v = get(key);
    if (!v) return fallback;
    if (!v->is_string()) fail(key, "must be a string, got " + echo_user_text(v->dump()));
    return v->get<std::string>();
  }
  // Keys present but never read.
  std::vector<std::string> unread() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : j_.items())
      if (!read_.count(k)) out.push_back(k);
    return out;
  }

 private:
  Json j_;
  std::string file_;
  std::set<std::string> read_;
};

// Keys that do not change a forward pass: provenance, dtype, training-only settings, caching
// and output switches, token ids read from the tokenizer files instead.
bool key_without_effect(const std::string& key) {
  static const std::set<std::string> keys = {
      "_name_or_path", "_model_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache",
      "initializer_range", "attention_dropout", "pretraining_tp", "cache_implementation", "output_attentions",
      "output_hidden_states", "return_dict", "unk_token_id", "sep_token_id", "_attn_implementation_autoset",
      "tokenizer_class", "max_window_layers", "use_sliding_window", "bos_token_id", "pad_token_id",
      "embedding_dropout", "hidden_dropout", "residual_dropout", "attn_implementation", "_commit_hash"};
  return keys.count(key) > 0;
}

std::vector<int32_t> token_ids(const Json* v, const std::string& where) {
  std::vector<int32_t> out;
  if (!v) return out;
  auto one = [&](const Json& x) {
    if (!x.is_number_unsigned() || x.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX))
      throw_input_error(where + ": eos_token_id: " + echo_user_text(x.dump()) + " is not a token id");
    out.push_back(x.get<int32_t>());
  };
  if (v->is_array()) {
    for (const Json& x : *v) one(x);
  } else {
    one(*v);
  }
  return out;
}

// Llama 3.1's "llama3" rope type as per-frequency divisors (transformers'
// _compute_llama3_parameters, which llama.cpp's converter stores as rope_freqs.weight).
std::vector<float> llama3_rope_factors(double base, uint32_t n_rot, double factor, double low, double high,
                                       double old_context) {
  std::vector<float> out;
  const double low_wavelen = old_context / low, high_wavelen = old_context / high;
  for (uint32_t i = 0; i < n_rot / 2; ++i) {
    const double freq = std::pow(base, -2.0 * i / n_rot);
    const double wavelen = 2 * std::numbers::pi / freq;
    double divisor = 1.0;
    if (wavelen > low_wavelen) {
      divisor = factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (old_context / wavelen - low) / (high - low);
      divisor = 1.0 / ((1 - smooth) / factor + smooth);
    }
    out.push_back(static_cast<float>(divisor));
  }
  return out;
}

}  // namespace

std::string hf_tensor_name(const std::string& runtime_name, const std::string& model_type) {
  const bool gemma = model_type == "gemma3_text";
  for (const NameRule& r : kGlobalNames)
    if (runtime_name == r.runtime) return r.hf;
  uint32_t layer = 0;
  std::string_view suffix;
  if (!split_layer_name(runtime_name, "blk.", layer, suffix)) return "";
  for (const NameRule& r : kLayerNames)
    if (rule_applies(r, gemma) && suffix == r.runtime) return "model.layers." + std::to_string(layer) + "." + r.hf;
  return "";
}

HfCheckpoint::HfCheckpoint(const std::string& dir) : dir_(dir) {
  path_ = dir;
  read_config();
  read_shards();
  map_tensors();
  for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                           "chat_template.jinja", "model.safetensors.index.json"})
    if (fs::exists(fs::path(dir_) / name)) files_read_.push_back((fs::path(dir_) / name).string());
  for (const SafetensorsFile& f : shards_) files_read_.push_back(f.name());
}

void HfCheckpoint::read_config() {
  const fs::path config_path = fs::path(dir_) / "config.json";
  if (!fs::exists(config_path))
    throw_input_error(dir_ + ": no config.json: a model directory needs config.json, tokenizer.json and safetensors "
                             "weights (a Hugging Face checkpoint); a GGUF model is a file");
  Config c(read_json_file(config_path), config_path.string());
  ModelArch& a = arch_;

  model_type_ = c.string("model_type", "");
  const HfArch* hf = nullptr;
  for (const HfArch& x : kArchs)
    if (model_type_ == x.model_type) hf = &x;
  if (!hf) {
    if (model_type_ == "gemma3")
      c.fail("model_type", "'gemma3' is the multimodal Gemma 3 (Gemma3ForConditionalGeneration); kvgate runs the text "
                           "model only (model_type gemma3_text, e.g. gemma-3-270m, gemma-3-1b)");
    c.fail("model_type", "'" + echo_user_text(model_type_) + "' is not supported by kvgate's runtime (supported: " +
                             kSupportedTypes + ")");
  }
  if (const Json* archs = c.get("architectures")) {
    if (!archs->is_array() || archs->size() != 1 || !(*archs)[0].is_string() ||
        (*archs)[0].get<std::string>() != hf->class_name)
      c.fail("architectures", echo_user_text(archs->dump()) + " is not [\"" + hf->class_name + "\"], the causal LM of " +
                                  model_type_ + " (kvgate runs text generation models only)");
  }
  if (const Json* q = c.get("quantization_config")) {
    const std::string method = q->is_object() && q->contains("quant_method") && (*q)["quant_method"].is_string()
                                   ? (*q)["quant_method"].get<std::string>()
                                   : "unknown";
    c.fail("quantization_config", "a quantized checkpoint (quant_method '" + echo_user_text(method) +
                                      "'); kvgate loads F32/F16/BF16 checkpoints only (GPTQ, AWQ, compressed-tensors, "
                                      "fp8 and bitsandbytes weights are not supported; a GGUF holds kvgate's quantized weights)");
  }
  for (const char* moe : {"num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"})
    if (c.has(moe)) c.fail(moe, "mixture-of-experts models are not supported by kvgate's runtime");

  const bool gemma = model_type_ == "gemma3_text";
  a.arch = hf->runtime_arch;
  a.name = c.string("_name_or_path", "");
  if (a.name.empty()) a.name = fs::path(dir_).filename().string();
  a.n_layers = c.u32("num_hidden_layers");
  a.n_embd = c.u32("hidden_size");
  a.n_heads = c.u32("num_attention_heads");
  a.n_kv_heads = c.u32("num_key_value_heads", a.n_heads);
  if (a.n_heads % a.n_kv_heads != 0)
    c.fail("num_key_value_heads", std::to_string(a.n_heads) + " attention heads are not a multiple of " +
                                      std::to_string(a.n_kv_heads) + " KV heads");
  if (c.has("head_dim")) {
    a.head_dim = c.u32("head_dim");
  } else {
    c.get("head_dim");
    if (a.n_embd % a.n_heads != 0)
      c.fail("hidden_size", std::to_string(a.n_embd) + " is not a multiple of " + std::to_string(a.n_heads) +
                                " heads and head_dim is absent");
    a.head_dim = a.n_embd / a.n_heads;
  }
  if (a.head_dim % 2 != 0) c.fail("head_dim", "must be even for RoPE, got " + std::to_string(a.head_dim));
  a.head_dim_v = a.head_dim;
  a.n_rot = a.head_dim;
  a.n_ff = c.u32("intermediate_size");
  a.n_vocab = c.u32("vocab_size");
  a.n_ctx_train = c.u32("max_position_embeddings", 0u);
  a.rms_eps = static_cast<float>(c.number("rms_norm_eps", 1e-6));
  if (!(a.rms_eps > 0.0f && a.rms_eps < 1.0f)) c.fail("rms_norm_eps", "must be in (0, 1)");
  // Hugging Face's Llama and Mistral rotate halves (rotate_half); GGUF files permute Q/K instead.
  a.rope_layout = RopeLayout::halves;
  tied_embeddings_ = c.boolean("tie_word_embeddings", gemma);

  const std::string act_key = gemma ? "hidden_activation" : "hidden_act";
  const std::string act = c.string(act_key, gemma ? "gelu_pytorch_tanh" : "silu");
  if (act != (gemma ? "gelu_pytorch_tanh" : "silu"))
    c.fail(act_key, "'" + echo_user_text(act) + "' is not supported for " + model_type_ + " (kvgate runs " +
                        (gemma ? "gelu_pytorch_tanh" : "silu") + ")");
  if (gemma) c.get("hidden_act");  // transformers writes both for Gemma; hidden_activation is the one it uses
  // Biases: their tensors decide (Qwen2 always has Q/K/V biases); the flags must agree with them,
  // which map_tensors' shape checks and Model::load's "every tensor used" rule enforce.
  c.boolean("attention_bias", model_type_ == "qwen2");
  c.boolean("mlp_bias", false);
  if (c.boolean("use_mrope", false)) c.fail("use_mrope", "multimodal RoPE is not supported");
  if (gemma) {
    if (c.get("attn_logit_softcapping"))
      c.fail("attn_logit_softcapping", "attention logit soft-capping (Gemma 2) is not supported by kvgate's runtime");
    if (c.boolean("use_bidirectional_attention", false))
      c.fail("use_bidirectional_attention", "bidirectional attention (an embedding model) is not supported");
    options_.final_logit_softcap = static_cast<float>(c.number("final_logit_softcapping", 0.0));
    options_.query_pre_attn_scalar = static_cast<float>(c.number("query_pre_attn_scalar", a.head_dim));
    if (!(options_.query_pre_attn_scalar > 0)) c.fail("query_pre_attn_scalar", "must be positive");
    options_.norm_weight_offset = 1.0f;
  }

  // RoPE: transformers 5 writes rope_parameters (for Gemma 3 one per layer type); earlier
  // versions rope_theta and rope_scaling.
  const Json* params = c.get("rope_parameters");
  const Json* scaling = c.get("rope_scaling");
  double theta = c.number("rope_theta", gemma ? 1e6 : 10000.0);
  double local_theta = gemma ? c.number("rope_local_base_freq", 10000.0) : theta;
  const Json* global_params = params;
  const Json* local_params = nullptr;
  std::string params_key = "rope_parameters";
  if (params && gemma && params->contains("full_attention")) {
    global_params = &(*params)["full_attention"];
    local_params = params->contains("sliding_attention") ? &(*params)["sliding_attention"] : nullptr;
    params_key = "rope_parameters.full_attention";
  }
  if (!global_params && scaling) {
    global_params = scaling;
    params_key = "rope_scaling";
  }
  auto rope_number = [&](const Json& p, const std::string& key, const char* name, double fallback) {
    if (!p.contains(name) || p[name].is_null()) return fallback;
    if (!p[name].is_number()) c.fail(key + "." + name, "must be a number");
    return p[name].get<double>();
  };
  std::string rope_type = "default";
  if (global_params) {
    const Json& p = *global_params;
    if (!p.is_object()) c.fail(params_key, "must be an object");
    for (const auto& [k, v] : p.items()) {
      static const std::set<std::string> known = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor",
                                                  "high_freq_factor", "original_max_position_embeddings"};
      if (!known.count(k))
        c.fail(params_key + "." + k, "is not a RoPE parameter kvgate implements (rope types default, linear, llama3)");
    }
    const char* type_key = p.contains("rope_type") ? "rope_type" : "type";
    if (p.contains(type_key)) {
      if (!p[type_key].is_string()) c.fail(params_key + "." + type_key, "must be a string");
      rope_type = p[type_key].get<std::string>();
    }
    theta = rope_number(p, params_key, "rope_theta", theta);
    if (rope_type == "linear") {
      const double factor = rope_number(p, params_key, "factor", 1.0);
      if (!(factor > 0)) c.fail(params_key + ".factor", "must be positive");
      a.rope_scaling = factor == 1.0 ? "none" : "linear";
      a.rope_freq_scale = static_cast<float>(1.0 / factor);
    } else if (rope_type == "llama3") {
      if (model_type_ != "llama") c.fail(params_key + "." + type_key, "'llama3' scaling is a Llama rope type");
      const double factor = rope_number(p, params_key, "factor", 0), low = rope_number(p, params_key, "low_freq_factor", 0),
                   high = rope_number(p, params_key, "high_freq_factor", 0),
                   old = rope_number(p, params_key, "original_max_position_embeddings", 0);
      if (!(factor > 0 && low > 0 && high > low && old > 0))
        c.fail(params_key, "llama3 rope scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                           "original_max_position_embeddings > 0");
      options_.rope_factors = llama3_rope_factors(theta, a.n_rot, factor, low, high, old);
    } else if (rope_type != "default") {
      c.fail(params_key + "." + type_key, "'" + echo_user_text(rope_type) +
                                              "' is not supported by kvgate's runtime (supported: default, linear, llama3; "
                                              "yarn, longrope and dynamic scaling are not)");
    }
  }
  if (local_params) {
    const Json& p = *local_params;
    const std::string type = p.contains("rope_type") && p["rope_type"].is_string() ? p["rope_type"].get<std::string>() : "default";
    if (type != "default")
      c.fail("rope_parameters.sliding_attention.rope_type", "'" + echo_user_text(type) + "': sliding-window layers run unscaled RoPE");
    local_theta = rope_number(p, "rope_parameters.sliding_attention", "rope_theta", local_theta);
  }
  if (!(theta > 0 && local_theta > 0)) c.fail("rope_theta", "must be positive");
  a.rope_base = static_cast<float>(theta);

  // Sliding-window layers: Gemma 3's pattern (layer_types, else every sliding_window_pattern-th
  // layer global), and Mistral's window on every layer, as transformers masks them.
  const Json* layer_types = c.get("layer_types");
  const Json* window = c.get("sliding_window");
  const Json* pattern = c.get("sliding_window_pattern");
  if (const Json* private_pattern = c.get("_sliding_window_pattern"); !pattern) pattern = private_pattern;
  const bool use_sliding = c.boolean("use_sliding_window", false);
  std::vector<bool> swa(a.n_layers, false);
  bool any_swa = false;
  if (layer_types) {
    if (!layer_types->is_array() || layer_types->size() != a.n_layers)
      c.fail("layer_types", "must list one type per layer (" + std::to_string(a.n_layers) + ")");
    for (uint32_t l = 0; l < a.n_layers; ++l) {
      const Json& t = (*layer_types)[l];
      if (t == "sliding_attention") {
        swa[l] = any_swa = true;
      } else if (t != "full_attention") {
        c.fail("layer_types", "entry " + std::to_string(l) + " " + echo_user_text(t.dump()) +
                                  " is neither full_attention nor sliding_attention");
      }
    }
  } else if (gemma) {
    uint32_t n = 6;
    if (pattern) {
      if (!pattern->is_number_unsigned() || pattern->get<uint64_t>() == 0) c.fail("sliding_window_pattern", "must be a positive integer");
      n = pattern->get<uint32_t>();
    }
    for (uint32_t l = 0; l < a.n_layers; ++l) {
      swa[l] = (l + 1) % n != 0;
      any_swa = any_swa || swa[l];
    }
  } else if (model_type_ == "mistral" && window) {
    swa.assign(a.n_layers, true);
    any_swa = true;
  }
  if ((model_type_ == "qwen2" || model_type_ == "qwen3") && use_sliding)
    c.fail("use_sliding_window", "Qwen sliding-window attention is not supported by kvgate's runtime");
  if (any_swa && !gemma && model_type_ != "mistral")
    c.fail("layer_types", "sliding-window layers are supported for gemma3_text and mistral only");
  if (any_swa) {
    if (!window || !window->is_number_unsigned() || window->get<uint64_t>() == 0 || window->get<uint64_t>() > (1u << 30))
      c.fail("sliding_window", "sliding-window layers need a positive window size");
    a.sliding_window = window->get<uint32_t>();
    a.layer_swa = swa;
    a.rope_base_swa = static_cast<float>(gemma ? local_theta : theta);
    if (!gemma && (a.rope_scaling != "none" || !options_.rope_factors.empty()))
      c.fail(params_key, "rope scaling together with a sliding window is not supported for " + model_type_);
  }

  if (const Json* syn = c.get("kvgate_synthetic")) {
    if (!syn->is_object()) c.fail("kvgate_synthetic", "must be an object");
    synthetic_ = syn->value("shape", std::string("?")) + ", " + syn->value("weights", std::string("?")) + " weights, seed " +
                 std::to_string(syn->value("seed", 0u));
  }
  eos_ids_ = token_ids(c.get("eos_token_id"), c.file());
  for (const std::string& key : c.unread())
    if (!key_without_effect(key))
      c.fail(key, "is not a config key kvgate knows for " + model_type_ +
                      "; it may change the forward pass, so the model is refused rather than run without it "
                      "(docs/models.md lists the keys kvgate reads and those it knows to have no effect)");

  const fs::path gen = fs::path(dir_) / "generation_config.json";
  if (fs::exists(gen)) {
    const Json g = read_json_file(gen);
    if (!g.is_object()) throw_input_error(gen.string() + ": not a JSON object");
    if (g.contains("eos_token_id") && !g["eos_token_id"].is_null())
      eos_ids_ = token_ids(&g["eos_token_id"], gen.string());
  }
}

void HfCheckpoint::read_shards() {
  const fs::path dir(dir_);
  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single = dir / "model.safetensors";
  if (fs::exists(index_path)) {
    const Json index = read_json_file(index_path);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      throw_input_error(index_path.string() + ": weight_map: missing or not an object");
    std::map<std::string, std::set<std::string>> by_shard;  // shard -> the tensors the index puts there
    for (const auto& [tensor, shard] : index["weight_map"].items()) {
      if (!shard.is_string()) throw_input_error(index_path.string() + ": weight_map: '" + echo_user_text(tensor) + "' is not mapped to a file name");
      const std::string name = shard.get<std::string>();
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
        throw_input_error(index_path.string() + ": weight_map: shard name '" + echo_user_text(name) + "' is not a file in the directory");
      by_shard[name].insert(tensor);
    }
    if (by_shard.empty()) throw_input_error(index_path.string() + ": weight_map is empty");
    for (const auto& [name, tensors] : by_shard) {
      const fs::path shard = dir / name;
      if (!fs::exists(shard))
        throw_input_error(index_path.string() + ": shard '" + name + "' is missing (it holds " + std::to_string(tensors.size()) +
                          " tensors, e.g. '" + echo_user_text(*tensors.begin()) + "'); the checkpoint is incomplete");
      SafetensorsFile f = SafetensorsFile::open(shard.string());
      for (const std::string& t : tensors)
        if (!f.find(t)) throw_input_error(shard.string() + ": has no tensor '" + echo_user_text(t) + "', which " + index_path.string() + " puts there");
      for (const SafetensorsTensor& t : f.tensors())
        if (!tensors.count(t.name))
          throw_input_error_at(shard.string(), t.file_offset, "tensor '" + echo_user_text(t.name) + "' is not in " +
                                                                  index_path.string() + "'s weight_map");
      file_bytes_ += f.file_size();
      shards_.push_back(std::move(f));
    }
  } else if (fs::exists(single)) {
    shards_.push_back(SafetensorsFile::open(single.string()));
    file_bytes_ = shards_.back().file_size();
  } else {
    const bool pickle = fs::exists(dir / "pytorch_model.bin") || fs::exists(dir / "pytorch_model.bin.index.json");
    throw_input_error(dir_ + ": no model.safetensors or model.safetensors.index.json" +
                      std::string(pickle ? " (pytorch_model.bin pickles are not read: save the model with safetensors)" : ""));
  }
}

void HfCheckpoint::map_tensors() {
  const bool gemma = model_type_ == "gemma3_text";
  const SafetensorsTensor* embed = nullptr;
  const SafetensorsTensor* head = nullptr;
  const SafetensorsFile* head_file = nullptr;
  for (const SafetensorsFile& f : shards_) {
    for (const SafetensorsTensor& s : f.tensors()) {
      // Buffers older transformers saved with the weights: derived from config.json, not weights.
      if (s.name.ends_with(".self_attn.rotary_emb.inv_freq")) continue;
      const std::string name = runtime_tensor_name(s.name, gemma, arch_.n_layers);
      if (name.empty()) {
        for (const char* q : {".qweight", ".qzeros", ".scales", ".g_idx", ".weight_scale", ".weight_packed", ".weight_scale_inv",
                              ".input_scale", ".SCB", ".weight_zero_point"})
          if (s.name.ends_with(q))
            throw_input_error_at(f.name(), s.file_offset, "tensor '" + echo_user_text(s.name) +
                                                              "' belongs to a quantized checkpoint (GPTQ/AWQ/compressed-tensors/fp8 style); "
                                                              "kvgate loads F32/F16/BF16 weights only");
        throw_input_error_at(f.name(), s.file_offset, "tensor '" + echo_user_text(s.name) + "' is not part of kvgate's " +
                                                          model_type_ + " forward pass (unknown tensor name); the model is refused "
                                                          "rather than run without it");
      }
      GgmlType type;
      if (s.dtype == "F32") {
        type = GgmlType::F32;
      } else if (s.dtype == "F16") {
        type = GgmlType::F16;
      } else if (s.dtype == "BF16") {
        type = GgmlType::BF16;
      } else {
        throw_input_error_at(f.name(), s.file_offset, "tensor '" + echo_user_text(s.name) + "' has dtype " + s.dtype +
                                                          "; kvgate reads F32, F16 and BF16 weights");
      }
      if (s.shape.empty() || s.shape.size() > 2)
        throw_input_error_at(f.name(), s.file_offset, "tensor '" + echo_user_text(s.name) + "' has " +
                                                          std::to_string(s.shape.size()) + " dimensions (1 or 2 expected)");
      if (name == "token_embd.weight") embed = &s;
      if (name == "output.weight") {
        head = &s;
        head_file = &f;
        if (tied_embeddings_) continue;  // checked against the embeddings below
      }
      ModelTensor t;
      t.name = name;
      t.stored_name = s.name;
      t.file = f.name();
      t.type = type;
      t.n_dims = static_cast<uint32_t>(s.shape.size());
      for (size_t d = 0; d < s.shape.size(); ++d) t.dims[d] = s.shape[s.shape.size() - 1 - d];
      t.n_elements = s.n_elements;
      t.n_bytes = s.n_bytes;
      t.file_offset = s.file_offset;
      t.data = s.data;
      add_tensor(std::move(t));
    }
  }
  // Tied embeddings: transformers uses the embedding matrix as the output projection; a saved
  // lm_head must then be that matrix.
  if (tied_embeddings_ && head &&
      (!embed || embed->n_bytes != head->n_bytes || embed->dtype != head->dtype ||
       std::memcmp(embed->data, head->data, head->n_bytes) != 0))
    throw_input_error_at(head_file->name(), head->file_offset,
                         "tensor 'lm_head.weight' differs from model.embed_tokens.weight, but config.json says "
                         "tie_word_embeddings (which one transformers would use is ambiguous)");
  if (!tied_embeddings_ && !head)
    throw_input_error(dir_ + ": no lm_head.weight, and config.json does not say tie_word_embeddings");
}

Tokenizer HfCheckpoint::tokenizer() const { return hf_tokenizer(dir_, eos_ids_); }

ChatTemplate HfCheckpoint::chat_template() const { return hf_chat_template(dir_); }

}  // namespace kvgate::runtime
