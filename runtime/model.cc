#include "runtime/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "core/error.h"
#include "kernels/attention.h"
#include "runtime/hf_checkpoint.h"

namespace kvgate::runtime {
namespace {

constexpr const char* kSupportedArchitectures = "llama (Llama 2/3.x, Mistral, SmolLM), qwen2, qwen3, gemma3";

// Loads tensors by name and remembers which ones the forward pass uses, so a tensor nobody
// consumes (a feature kvgate does not implement) is reported instead of silently ignored.
class TensorLoader {
 public:
  explicit TensorLoader(const ModelFiles& f) : f_(f) {}

  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

  // A norm, bias or rope-factor vector, widened to float (F16/BF16 in Hugging Face checkpoints).
  std::vector<float> vector(const std::string& name, uint64_t expected) {
    const ModelTensor* t = f_.find_tensor(name);
    if (!t) throw_input_error(f_.path() + ": missing tensor '" + name + "'");
    const bool floating = t->type == GgmlType::F32 || t->type == GgmlType::F16 || t->type == GgmlType::BF16;
    if (!floating || t->n_elements != expected || t->dims[1] != 1)
      throw_input_error_at(t->file, t->file_offset,
                           "tensor '" + t->stored_name + "' must be F32, F16 or BF16 with " + std::to_string(expected) +
                               " elements");
    used_.insert(t->name);
    std::vector<float> v(expected);
    WeightMatrix row;
    row.type = t->type;
    row.rows = 1;
    row.cols = static_cast<int64_t>(expected);
    row.row_bytes = static_cast<size_t>(t->n_bytes);
    row.data = t->data;
    dequantize_weight_row(row, 0, v.data());
    // Hugging Face's Gemma stores RMSNorm weights w for a scale of (1 + w).
    if (f_.options().norm_weight_offset != 0.0f && name.ends_with("norm.weight"))
      for (float& x : v) x += f_.options().norm_weight_offset;
    return v;
  }
  std::vector<float> optional_vector(const std::string& name, uint64_t expected) {
    return has(name) ? vector(name, expected) : std::vector<float>();
  }

  WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) {
    const ModelTensor* t = f_.find_tensor(name);
    if (!t) throw_input_error(f_.path() + ": missing tensor '" + name + "'" + stored_hint(name));
    WeightMatrix w = weight_from_tensor(*t);
    if (w.rows != rows || w.cols != cols)
      throw_input_error_at(t->file, t->file_offset,
                           "tensor '" + t->stored_name + "' has shape [" + std::to_string(w.rows) + " x " + std::to_string(w.cols) +
                               "], expected [" + std::to_string(rows) + " x " + std::to_string(cols) + "]");
    used_.insert(t->name);
    return w;
  }

  // Every tensor of the file must have been loaded.
  void require_all_used(const std::string& arch) const {
    for (const ModelTensor& t : f_.tensors())
      if (!used_.count(t.name))
        throw_input_error_at(t.file, t.file_offset,
                             "tensor '" + t.stored_name + "' is not part of kvgate's " + arch +
                                 " forward pass; this model uses a feature kvgate does not implement");
  }

 private:
  // A Hugging Face directory names its tensors otherwise.
  std::string stored_hint(const std::string& name) const {
    if (f_.format() != ModelFormat::hf) return "";
    return " (Hugging Face name '" + hf_tensor_name(name, static_cast<const HfCheckpoint&>(f_).model_type()) + "')";
  }

  const ModelFiles& f_;
  std::set<std::string> used_;
};

// x[n][dim] -> out[n][dim], each row scaled to unit RMS then by weight.
void rms_norm_rows(const float* x, int n, int dim, const float* weight, float eps, float* out) {
  for (int i = 0; i < n; ++i) {
    const float* row = x + static_cast<size_t>(i) * dim;
    double ss = 0.0;
    for (int j = 0; j < dim; ++j) ss += static_cast<double>(row[j]) * row[j];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
    float* o = out + static_cast<size_t>(i) * dim;
    for (int j = 0; j < dim; ++j) o[j] = row[j] * scale * weight[j];
  }
}

void add_bias(float* y, int n, const std::vector<float>& bias) {
  if (bias.empty()) return;
  const size_t dim = bias.size();
  for (int i = 0; i < n; ++i)
    for (size_t j = 0; j < dim; ++j) y[static_cast<size_t>(i) * dim + j] += bias[j];
}

// Rotates each head of x[n][heads][head_dim] by pos * inv_freq[p]. adjacent_pairs: ggml's
// "normal" RoPE on (x[2p], x[2p+1]) — GGUF Llama weights are permuted for it; halves: GPT-NeoX's
// on (x[p], x[p + n_rot/2]).
void apply_rope(float* x, int n, int heads, int head_dim, int n_rot, int64_t pos0, const std::vector<float>& inv_freq,
                RopeLayout layout) {
  const int half = n_rot / 2;
  const int stride = layout == RopeLayout::adjacent_pairs ? 1 : half;
  for (int i = 0; i < n; ++i) {
    const double pos = static_cast<double>(pos0 + i);
    for (int p = 0; p < half; ++p) {
      const double angle = pos * inv_freq[static_cast<size_t>(p)];
      const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
      const int first = layout == RopeLayout::adjacent_pairs ? 2 * p : p;
      for (int h = 0; h < heads; ++h) {
        float* v = x + (static_cast<size_t>(i) * heads + h) * head_dim + first;
        const float a = v[0], b = v[stride];
        v[0] = a * c - b * s;
        v[stride] = a * s + b * c;
      }
    }
  }
}

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
}

// The supported architectures and what each needs from the file.
struct ArchRules {
  bool q_k_norm = false;
  bool sandwich_norms = false;
  bool gemma = false;  // embedding scale, GeGLU, Gemma's query scale and soft-cap
};

ArchRules rules_for(const std::string& path, const ModelArch& a) {
  if (a.arch == "llama") return {};
  if (a.arch == "qwen2") return {};
  if (a.arch == "qwen3") return {true, false, false};
  if (a.arch == "gemma3") return {true, true, true};
  throw_input_error(path + ": general.architecture '" + a.arch + "' is not supported by kvgate's runtime (supported: " +
                    kSupportedArchitectures + ")");
}

void check_hyper_parameters(const GgufFile& f, const ModelArch& a) {
  const std::string& path = f.name();
  const std::string p = a.arch + ".";
  if (a.head_dim != a.head_dim_v)
    throw_input_error(path + ": " + p + "attention.key_length (" + std::to_string(a.head_dim) + ") and " + p +
                      "attention.value_length (" + std::to_string(a.head_dim_v) +
                      ") differ; kvgate's runtime needs equal key and value head sizes");
  if (a.n_ff == 0) throw_input_error(path + ": missing metadata key '" + p + "feed_forward_length'");
  if (a.n_rot == 0 || a.n_rot % 2 != 0 || a.n_rot > a.head_dim)
    throw_input_error(path + ": " + p + "rope.dimension_count " + std::to_string(a.n_rot) + " does not fit head size " +
                      std::to_string(a.head_dim));
  // llama.cpp requires full rotary for these (an assertion in their graphs).
  if (a.arch != "gemma3" && a.n_rot != a.head_dim)
    throw_input_error(path + ": " + p + "rope.dimension_count is " + std::to_string(a.n_rot) + ", but " + a.arch +
                      " rotates the whole head of " + std::to_string(a.head_dim));
  if (a.rope_scaling != "none" && a.rope_scaling != "linear")
    throw_input_error(path + ": " + p + "rope.scaling.type '" + a.rope_scaling +
                      "' is not supported by kvgate's runtime (supported: none, linear, and Llama 3 rope_freqs factors)");
  if (const auto attn_factor = f.get_f32(p + "rope.scaling.attn_factor"); attn_factor && *attn_factor != 1.0f)
    throw_input_error(path + ": " + p + "rope.scaling.attn_factor " + std::to_string(*attn_factor) +
                      " is not supported by kvgate's runtime (only 1)");
  if (const auto experts = f.get_u32(p + "expert_count"); experts && *experts > 0)
    throw_input_error(path + ": " + p + "expert_count is " + std::to_string(*experts) +
                      "; mixture-of-experts models are not supported by kvgate's runtime");
  if (const auto pattern = f.get_u32(p + "attention.sliding_window_pattern"); pattern && a.arch != "gemma3")
    throw_input_error(path + ": " + p + "attention.sliding_window_pattern: sliding-window attention is supported for gemma3 only");
}

std::vector<float> rope_frequencies(double base, int n_rot, double scale, const std::vector<float>& factors) {
  std::vector<float> inv_freq;
  for (int i = 0; i < n_rot / 2; ++i) {
    double f = std::pow(base, -2.0 * i / n_rot);
    // Multiplying by exactly 1 keeps the frequencies of unscaled models bit-identical.
    if (scale != 1.0) f *= scale;
    if (!factors.empty()) f /= factors[static_cast<size_t>(i)];
    inv_freq.push_back(static_cast<float>(f));
  }
  return inv_freq;
}

}  // namespace

std::vector<uint8_t> rows_for_adjacent_pairs(const WeightMatrix& w, int head_dim) {
  KVGATE_CHECK(head_dim > 0 && head_dim % 2 == 0 && w.rows % head_dim == 0, "rows_for_adjacent_pairs: bad head size");
  std::vector<uint8_t> out(static_cast<size_t>(w.rows) * w.row_bytes);
  const int half = head_dim / 2;
  for (int64_t r = 0; r < w.rows; ++r) {
    const int64_t head = r / head_dim, in_head = r % head_dim;
    const int64_t from = head * head_dim + in_head / 2 + (in_head % 2) * half;
    std::memcpy(out.data() + static_cast<size_t>(r) * w.row_bytes, w.row(from), w.row_bytes);
  }
  return out;
}

// ---- ModelKvCache ------------------------------------------------------------------------------

ModelKvCache::ModelKvCache(std::unique_ptr<kernels::PagedKvCache> full, std::unique_ptr<kernels::PagedKvCache> local,
                           std::vector<int> cache_layer, std::vector<bool> layer_is_local)
    : full_(std::move(full)), local_(std::move(local)), cache_layer_(std::move(cache_layer)),
      layer_is_local_(std::move(layer_is_local)) {
  KVGATE_CHECK(full_ || local_, "a model cache needs at least one paged cache");
}

kernels::SeqId ModelKvCache::create_sequence() {
  const kernels::SeqId a = full_ ? full_->create_sequence() : -1;
  const kernels::SeqId b = local_ ? local_->create_sequence() : a;
  KVGATE_CHECK(!full_ || !local_ || a == b, "the full and sliding-window caches' sequence ids diverged");
  return full_ ? a : b;
}

kernels::SeqId ModelKvCache::fork(kernels::SeqId parent, int64_t n_tokens) {
  const kernels::SeqId a = full_ ? full_->fork(parent, n_tokens) : -1;
  const kernels::SeqId b = local_ ? local_->fork(parent, n_tokens) : a;
  KVGATE_CHECK(!full_ || !local_ || a == b, "the full and sliding-window caches' sequence ids diverged");
  return full_ ? a : b;
}

void ModelKvCache::release(kernels::SeqId seq) {
  if (full_) full_->release(seq);
  if (local_) local_->release(seq);
}

int64_t ModelKvCache::length(kernels::SeqId seq) const {
  if (full_ && local_) return std::min(full_->length(seq), local_->length(seq));
  return full_ ? full_->length(seq) : local_->length(seq);
}

kernels::PagedKvCache& ModelKvCache::cache_of(int layer) {
  return layer_is_local_.at(static_cast<size_t>(layer)) ? *local_ : *full_;
}
const kernels::PagedKvCache& ModelKvCache::cache_of(int layer) const {
  return layer_is_local_.at(static_cast<size_t>(layer)) ? *local_ : *full_;
}

size_t ModelKvCache::used_bytes() const {
  return (full_ ? full_->memory().used_bytes() : 0) + (local_ ? local_->memory().used_bytes() : 0);
}

// ---- Model -------------------------------------------------------------------------------------

std::unique_ptr<Model> Model::load(const std::string& path) { return load(ModelFiles::open(path)); }

std::unique_ptr<Model> Model::load(std::unique_ptr<ModelFiles> files) {
  std::unique_ptr<Model> m(new Model(std::move(files)));
  const ModelFiles& f = *m->files_;
  const std::string& path = f.path();
  m->arch_ = f.arch();
  const ModelArch& a = m->arch_;
  const ArchRules rules = rules_for(path, a);
  // A Hugging Face config was checked key by key when it was read (hf_checkpoint.cc).
  if (const GgufFile* gguf = f.gguf()) check_hyper_parameters(*gguf, a);
  TensorLoader load(f);
  const int64_t E = a.n_embd, D = a.head_dim, H = a.n_heads, KV = a.n_kv_heads, F = a.n_ff, V = a.n_vocab;
  m->token_embd_ = load.matrix("token_embd.weight", V, E);
  m->output_ = load.has("output.weight") ? load.matrix("output.weight", V, E) : m->token_embd_;
  m->output_norm_ = load.vector("output_norm.weight", static_cast<uint64_t>(E));
  m->output_bias_ = load.optional_vector("output.bias", static_cast<uint64_t>(V));
  for (uint32_t l = 0; l < a.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights lw;
    lw.attn_norm = load.vector(p + "attn_norm.weight", static_cast<uint64_t>(E));
    lw.wq = load.matrix(p + "attn_q.weight", H * D, E);
    lw.wk = load.matrix(p + "attn_k.weight", KV * D, E);
    lw.wv = load.matrix(p + "attn_v.weight", KV * D, E);
    lw.wo = load.matrix(p + "attn_output.weight", E, H * D);
    lw.bq = load.optional_vector(p + "attn_q.bias", static_cast<uint64_t>(H * D));
    lw.bk = load.optional_vector(p + "attn_k.bias", static_cast<uint64_t>(KV * D));
    lw.bv = load.optional_vector(p + "attn_v.bias", static_cast<uint64_t>(KV * D));
    lw.bo = load.optional_vector(p + "attn_output.bias", static_cast<uint64_t>(E));
    if (rules.q_k_norm) {
      lw.q_norm = load.vector(p + "attn_q_norm.weight", static_cast<uint64_t>(D));
      lw.k_norm = load.vector(p + "attn_k_norm.weight", static_cast<uint64_t>(D));
    }
    if (rules.sandwich_norms) {
      lw.post_attn_norm = load.vector(p + "post_attention_norm.weight", static_cast<uint64_t>(E));
      lw.post_ffn_norm = load.vector(p + "post_ffw_norm.weight", static_cast<uint64_t>(E));
    }
    lw.ffn_norm = load.vector(p + "ffn_norm.weight", static_cast<uint64_t>(E));
    lw.w_gate = load.matrix(p + "ffn_gate.weight", F, E);
    lw.w_up = load.matrix(p + "ffn_up.weight", F, E);
    lw.w_down = load.matrix(p + "ffn_down.weight", E, F);
    if (a.arch == "llama") {
      lw.b_gate = load.optional_vector(p + "ffn_gate.bias", static_cast<uint64_t>(F));
      lw.b_up = load.optional_vector(p + "ffn_up.bias", static_cast<uint64_t>(F));
      lw.b_down = load.optional_vector(p + "ffn_down.bias", static_cast<uint64_t>(E));
    }
    m->layers_.push_back(std::move(lw));
  }
  // Llama 3.1+ files store their rope scaling as per-frequency divisors (llama.cpp's
  // rope_freqs.weight, one tensor shared by every layer).
  std::vector<float> rope_factors = f.options().rope_factors;
  if (a.arch == "llama" && rope_factors.empty()) rope_factors = load.optional_vector("rope_freqs.weight", a.n_rot / 2);
  load.require_all_used(a.arch);
  m->weight_bytes_ = f.weight_bytes();

  ForwardFeatures& ft = m->features_;
  if (rules.gemma) {
    ft.embedding_scale = std::sqrt(static_cast<float>(a.n_embd));
    ft.activation = FfnActivation::gelu_tanh;
    // Gemma's query_pre_attn_scalar: n_embd / n_heads for the 27B model, head_dim otherwise
    // (llama.cpp decides by the layer count, 62).
    ft.attention_scale = a.n_layers == 62 ? 1.0f / std::sqrt(static_cast<float>(a.n_embd / a.n_heads))
                                          : 1.0f / std::sqrt(static_cast<float>(a.head_dim));
    // A Hugging Face config states the scalar (query_pre_attn_scalar).
    if (f.options().query_pre_attn_scalar > 0.0f) ft.attention_scale = 1.0f / std::sqrt(f.options().query_pre_attn_scalar);
    ft.final_logit_softcap = f.options().final_logit_softcap;
  }
  // Gemma 3's local layers, or Mistral's window on every layer (Hugging Face config).
  ft.sliding_window = a.n_swa_layers() > 0;
  const int n_rot = static_cast<int>(a.n_rot);
  m->rope_inv_freq_ = rope_frequencies(a.rope_base, n_rot, a.rope_freq_scale, rope_factors);
  // Sliding-window layers have their own base and are never scaled (rope_freq_scale_train_swa).
  m->rope_inv_freq_swa_ = rope_frequencies(a.rope_base_swa, n_rot, 1.0, {});
  return m;
}

bool Model::is_plain_llama(std::string* why) const {
  auto fail = [&](const std::string& what) {
    if (why) *why = what;
    return false;
  };
  if (arch_.rope_layout != RopeLayout::adjacent_pairs && arch_.n_rot != arch_.head_dim)
    return fail("RoPE on halves of part of each head");
  if (features_.sliding_window) return fail("sliding-window attention layers");
  if (features_.embedding_scale != 1.0f) return fail("scaled embeddings");
  if (features_.activation != FfnActivation::silu) return fail("a GELU feed-forward");
  if (features_.attention_scale != 0.0f) return fail("a query scale of its own");
  if (features_.final_logit_softcap != 0.0f) return fail("final logit soft-capping");
  if (!output_bias_.empty()) return fail("an output bias");
  for (const LayerWeights& w : layers_) {
    if (!w.bq.empty() || !w.bk.empty() || !w.bv.empty() || !w.bo.empty()) return fail("attention biases");
    if (!w.b_gate.empty() || !w.b_up.empty() || !w.b_down.empty()) return fail("feed-forward biases");
    if (!w.q_norm.empty() || !w.k_norm.empty()) return fail("per-head Q/K norms");
    if (!w.post_attn_norm.empty() || !w.post_ffn_norm.empty()) return fail("post-attention / post-FFN norms");
  }
  return true;
}

std::unique_ptr<ModelKvCache> Model::make_cache(const kernels::KvConfig& config, int64_t max_tokens) const {
  kernels::PagedKvCacheShape shape;
  shape.n_kv_heads = static_cast<int>(arch_.n_kv_heads);
  shape.head_dim = static_cast<int>(arch_.head_dim);
  shape.page_tokens = 32;
  shape.capacity_pages = (max_tokens + shape.page_tokens - 1) / shape.page_tokens + 1;
  const int n_layers = static_cast<int>(arch_.n_layers);
  // Per-layer overrides (first/last layers) keep their model layer numbers.
  const std::vector<kernels::LayerFormats> formats = kernels::layer_formats(config, n_layers);
  std::vector<kernels::LayerFormats> full_formats, local_formats;
  std::vector<int> cache_layer(static_cast<size_t>(n_layers));
  std::vector<bool> is_local(static_cast<size_t>(n_layers), false);
  for (int l = 0; l < n_layers; ++l) {
    is_local[static_cast<size_t>(l)] = arch_.is_swa(static_cast<uint32_t>(l));
    auto& list = is_local[static_cast<size_t>(l)] ? local_formats : full_formats;
    cache_layer[static_cast<size_t>(l)] = static_cast<int>(list.size());
    list.push_back(formats[static_cast<size_t>(l)]);
  }
  std::unique_ptr<kernels::PagedKvCache> full, local;
  if (!full_formats.empty()) full = std::make_unique<kernels::PagedKvCache>(full_formats, shape);
  if (!local_formats.empty()) {
    kernels::PagedKvCacheShape local_shape = shape;
    local_shape.window = arch_.sliding_window;
    local = std::make_unique<kernels::PagedKvCache>(local_formats, local_shape);
  }
  auto cache = std::make_unique<ModelKvCache>(std::move(full), std::move(local), std::move(cache_layer), std::move(is_local));
  cache->set_arithmetic(config.arithmetic);
  return cache;
}

void Model::embed(int32_t token, float* out) const {
  if (token < 0 || token >= token_embd_.rows)
    throw_input_error("token id " + std::to_string(token) + " is outside the vocabulary (0.." +
                      std::to_string(token_embd_.rows - 1) + ")");
  dequantize_weight_row(token_embd_, token, out);
  if (features_.embedding_scale != 1.0f)
    for (int64_t i = 0; i < token_embd_.cols; ++i) out[i] *= features_.embedding_scale;
}

void Model::forward(ThreadPool& pool, ModelKvCache& cache, kernels::SeqId seq, std::span<const int32_t> tokens,
                    bool all_logits, float* logits) const {
  const int n = static_cast<int>(tokens.size());
  if (n == 0) return;
  const int E = static_cast<int>(arch_.n_embd), H = static_cast<int>(arch_.n_heads);
  const int KV = static_cast<int>(arch_.n_kv_heads), D = static_cast<int>(arch_.head_dim);
  const int F = static_cast<int>(arch_.n_ff);
  const int n_rot = static_cast<int>(arch_.n_rot);
  const int64_t pos0 = cache.length(seq);

  std::vector<float> x(static_cast<size_t>(n) * E);       // residual stream [n][E]
  std::vector<float> xn(static_cast<size_t>(n) * E);      // normed input [n][E]
  std::vector<float> q(static_cast<size_t>(n) * H * D);   // queries [n][H][D]
  std::vector<float> k(static_cast<size_t>(n) * KV * D);  // keys [n][KV][D]
  std::vector<float> v(static_cast<size_t>(n) * KV * D);  // values [n][KV][D]
  std::vector<float> att(static_cast<size_t>(n) * H * D); // attention output [n][H][D]
  std::vector<float> proj(static_cast<size_t>(n) * E);    // projections back to [n][E]
  std::vector<float> gate(static_cast<size_t>(n) * F);    // [n][F]
  std::vector<float> up(static_cast<size_t>(n) * F);      // [n][F]

  for (int i = 0; i < n; ++i) embed(tokens[static_cast<size_t>(i)], x.data() + static_cast<size_t>(i) * E);
  // Engines round matmul inputs (llama.cpp's CPU matmuls convert theirs to the weights' dot
  // type, q8_1 next to Q4_1 weights, ...; llama.cpp's cuBLAS path and vLLM multiply 16-bit
  // activations with 16-bit weights); under @engine= kvgate rounds each input the same way
  // (round_input_like_engine). Every buffer rounded here is read only by the matmuls that follow.
  const kernels::Arithmetic engine = cache.arithmetic();
  const auto round_input = [&](const WeightMatrix& w, float* in, int rows) {
    round_input_like_engine(engine, w.type, in, rows, w.cols);
  };
  // One rounded input feeds several matmuls (Q, K, V; gate, up): they must round it alike.
  const auto same_rounding = [&](const WeightMatrix& a, const WeightMatrix& b) {
    return engine_dot_input(engine, a.type) == engine_dot_input(engine, b.type);
  };

  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerWeights& w = layers_[l];
    const bool local = arch_.is_swa(static_cast<uint32_t>(l));
    rms_norm_rows(x.data(), n, E, w.attn_norm.data(), arch_.rms_eps, xn.data());
    {
      const WeightMatrix* qkv[] = {&w.wq, &w.wk, &w.wv};
      float* out[] = {q.data(), k.data(), v.data()};
      KVGATE_CHECK(same_rounding(w.wk, w.wq) && same_rounding(w.wv, w.wq),
                   "engine input rounding: Q, K and V weights whose inputs the engine rounds differently");
      round_input(w.wq, xn.data(), n);
      matmul_many(pool, qkv, xn.data(), n, out);
    }
    add_bias(q.data(), n, w.bq);
    add_bias(k.data(), n, w.bk);
    add_bias(v.data(), n, w.bv);
    if (!w.q_norm.empty()) {
      rms_norm_rows(q.data(), n * H, D, w.q_norm.data(), arch_.rms_eps, q.data());
      rms_norm_rows(k.data(), n * KV, D, w.k_norm.data(), arch_.rms_eps, k.data());
    }
    const std::vector<float>& inv_freq = local ? rope_inv_freq_swa_ : rope_inv_freq_;
    apply_rope(q.data(), n, H, D, n_rot, pos0, inv_freq, arch_.rope_layout);
    apply_rope(k.data(), n, KV, D, n_rot, pos0, inv_freq, arch_.rope_layout);
    // Keys are quantized after RoPE, and the chunk attends to its own quantized K/V, as engines do.
    kernels::PagedKvCache& layer_cache = cache.cache_of(static_cast<int>(l));
    const int cache_layer = cache.index_in_cache(static_cast<int>(l));
    layer_cache.append(seq, cache_layer, k.data(), v.data(), n);
    kernels::AttentionShape shape;
    shape.n_heads = H;
    shape.scale = features_.attention_scale;
    kernels::paged_attention(layer_cache, seq, cache_layer, shape, q.data(), n, att.data(), &pool);
    round_input(w.wo, att.data(), n);
    matmul(pool, w.wo, att.data(), n, proj.data());
    add_bias(proj.data(), n, w.bo);
    if (!w.post_attn_norm.empty()) rms_norm_rows(proj.data(), n, E, w.post_attn_norm.data(), arch_.rms_eps, proj.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];

    rms_norm_rows(x.data(), n, E, w.ffn_norm.data(), arch_.rms_eps, xn.data());
    {
      const WeightMatrix* gate_up[] = {&w.w_gate, &w.w_up};
      float* out[] = {gate.data(), up.data()};
      KVGATE_CHECK(same_rounding(w.w_up, w.w_gate),
                   "engine input rounding: gate and up weights whose inputs the engine rounds differently");
      round_input(w.w_gate, xn.data(), n);
      matmul_many(pool, gate_up, xn.data(), n, out);
    }
    add_bias(gate.data(), n, w.b_gate);
    add_bias(up.data(), n, w.b_up);
    if (features_.activation == FfnActivation::silu) {
      for (size_t i = 0; i < gate.size(); ++i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];  // SiLU(gate) * up
      }
    } else {
      for (size_t i = 0; i < gate.size(); ++i) gate[i] = gelu_tanh(gate[i]) * up[i];
    }
    round_input(w.w_down, gate.data(), n);
    matmul(pool, w.w_down, gate.data(), n, proj.data());
    add_bias(proj.data(), n, w.b_down);
    if (!w.post_ffn_norm.empty()) rms_norm_rows(proj.data(), n, E, w.post_ffn_norm.data(), arch_.rms_eps, proj.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  }

  const int first = all_logits ? 0 : n - 1;
  const int rows = n - first;
  rms_norm_rows(x.data() + static_cast<size_t>(first) * E, rows, E, output_norm_.data(), arch_.rms_eps, xn.data());
  round_input(output_, xn.data(), rows);
  matmul(pool, output_, xn.data(), rows, logits);
  add_bias(logits, rows, output_bias_);
  if (const float cap = features_.final_logit_softcap; cap != 0.0f) {
    const size_t count = static_cast<size_t>(rows) * static_cast<size_t>(output_.rows);
    for (size_t i = 0; i < count; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  }
}

}  // namespace kvgate::runtime
