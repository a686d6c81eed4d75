#include "runtime/model.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/attention.h"

namespace kvgate::runtime {
namespace {

std::vector<float> load_vector(const GgufFile& f, const std::string& name, uint64_t expected) {
  const GgufTensor* t = f.find_tensor(name);
  if (!t) throw_input_error(f.name() + ": missing tensor '" + name + "'");
  if (t->type != GgmlType::F32 || t->n_elements != expected)
    throw_input_error_at(f.name(), t->file_offset,
                         "tensor '" + name + "' must be F32 with " + std::to_string(expected) + " elements");
  std::vector<float> v(expected);
  std::memcpy(v.data(), t->data, expected * sizeof(float));
  return v;
}

WeightMatrix load_matrix(const GgufFile& f, const std::string& name, int64_t rows, int64_t cols) {
  const GgufTensor* t = f.find_tensor(name);
  if (!t) throw_input_error(f.name() + ": missing tensor '" + name + "'");
  WeightMatrix w = weight_from_tensor(f, *t);
  if (w.rows != rows || w.cols != cols)
    throw_input_error_at(f.name(), t->file_offset,
                         "tensor '" + name + "' has shape [" + std::to_string(w.rows) + " x " + std::to_string(w.cols) +
                             "], expected [" + std::to_string(rows) + " x " + std::to_string(cols) + "]");
  return w;
}

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

// GGUF Llama weights are permuted for ggml's "normal" RoPE, which rotates adjacent pairs
// (x[2i], x[2i+1]) by pos * inv_freq[i].
void apply_rope(float* x, int n, int heads, int head_dim, int n_rot, int64_t pos0, const std::vector<float>& inv_freq) {
  for (int i = 0; i < n; ++i) {
    const double pos = static_cast<double>(pos0 + i);
    for (int p = 0; p < n_rot / 2; ++p) {
      const double angle = pos * inv_freq[static_cast<size_t>(p)];
      const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
      for (int h = 0; h < heads; ++h) {
        float* v = x + (static_cast<size_t>(i) * heads + h) * head_dim + 2 * p;
        const float a = v[0], b = v[1];
        v[0] = a * c - b * s;
        v[1] = a * s + b * c;
      }
    }
  }
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path) {
  std::unique_ptr<Model> m(new Model(GgufFile::open(path), path));
  const GgufFile& f = m->gguf_;
  m->arch_ = read_model_arch(f);
  const ModelArch& a = m->arch_;
  if (a.head_dim != a.head_dim_v)
    throw_input_error(path + ": key and value head sizes differ (" + std::to_string(a.head_dim) + " vs " +
                      std::to_string(a.head_dim_v) + "); only Llama-family models are supported");
  const int64_t E = a.n_embd, D = a.head_dim, H = a.n_heads, KV = a.n_kv_heads, F = a.n_ff, V = a.n_vocab;
  m->token_embd_ = load_matrix(f, "token_embd.weight", V, E);
  m->output_ = f.find_tensor("output.weight") ? load_matrix(f, "output.weight", V, E) : m->token_embd_;
  m->output_norm_ = load_vector(f, "output_norm.weight", static_cast<uint64_t>(E));
  for (uint32_t l = 0; l < a.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights lw;
    lw.attn_norm = load_vector(f, p + "attn_norm.weight", static_cast<uint64_t>(E));
    lw.wq = load_matrix(f, p + "attn_q.weight", H * D, E);
    lw.wk = load_matrix(f, p + "attn_k.weight", KV * D, E);
    lw.wv = load_matrix(f, p + "attn_v.weight", KV * D, E);
    lw.wo = load_matrix(f, p + "attn_output.weight", E, H * D);
    lw.ffn_norm = load_vector(f, p + "ffn_norm.weight", static_cast<uint64_t>(E));
    lw.w_gate = load_matrix(f, p + "ffn_gate.weight", F, E);
    lw.w_up = load_matrix(f, p + "ffn_up.weight", F, E);
    lw.w_down = load_matrix(f, p + "ffn_down.weight", E, F);
    m->layers_.push_back(std::move(lw));
  }
  for (const GgufTensor& t : f.tensors()) m->weight_bytes_ += t.n_bytes;
  const int n_rot = static_cast<int>(a.n_rot ? a.n_rot : a.head_dim);
  if (n_rot % 2 != 0 || n_rot > static_cast<int>(a.head_dim))
    throw_input_error(path + ": rope dimension count " + std::to_string(n_rot) + " does not fit head size " +
                      std::to_string(a.head_dim));
  for (int i = 0; i < n_rot / 2; ++i)
    m->rope_inv_freq_.push_back(static_cast<float>(std::pow(static_cast<double>(a.rope_base), -2.0 * i / n_rot)));
  return m;
}

std::unique_ptr<kernels::PagedKvCache> Model::make_cache(const kernels::KvConfig& config, int64_t max_tokens) const {
  kernels::PagedKvCacheShape shape;
  shape.n_kv_heads = static_cast<int>(arch_.n_kv_heads);
  shape.head_dim = static_cast<int>(arch_.head_dim);
  shape.page_tokens = 32;
  shape.capacity_pages = (max_tokens + shape.page_tokens - 1) / shape.page_tokens + 1;
  return std::make_unique<kernels::PagedKvCache>(config, static_cast<int>(arch_.n_layers), shape);
}

void Model::embed(int32_t token, float* out) const {
  if (token < 0 || token >= token_embd_.rows)
    throw_input_error("token id " + std::to_string(token) + " is outside the vocabulary (0.." +
                      std::to_string(token_embd_.rows - 1) + ")");
  dequantize_weight_row(token_embd_, token, out);
}

void Model::forward(ThreadPool& pool, kernels::PagedKvCache& cache, kernels::SeqId seq,
                    std::span<const int32_t> tokens, bool all_logits, float* logits) const {
  const int n = static_cast<int>(tokens.size());
  if (n == 0) return;
  const int E = static_cast<int>(arch_.n_embd), H = static_cast<int>(arch_.n_heads);
  const int KV = static_cast<int>(arch_.n_kv_heads), D = static_cast<int>(arch_.head_dim);
  const int F = static_cast<int>(arch_.n_ff);
  const int n_rot = static_cast<int>(rope_inv_freq_.size() * 2);
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

  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerWeights& w = layers_[l];
    rms_norm_rows(x.data(), n, E, w.attn_norm.data(), arch_.rms_eps, xn.data());
    matmul(pool, w.wq, xn.data(), n, q.data());
    matmul(pool, w.wk, xn.data(), n, k.data());
    matmul(pool, w.wv, xn.data(), n, v.data());
    apply_rope(q.data(), n, H, D, n_rot, pos0, rope_inv_freq_);
    apply_rope(k.data(), n, KV, D, n_rot, pos0, rope_inv_freq_);
    // Keys are quantized after RoPE, and the chunk attends to its own quantized K/V, as engines do.
    cache.append(seq, static_cast<int>(l), k.data(), v.data(), n);
    kernels::AttentionShape shape;
    shape.n_heads = H;
    kernels::paged_attention(cache, seq, static_cast<int>(l), shape, q.data(), n, att.data(), &pool);
    matmul(pool, w.wo, att.data(), n, proj.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];

    rms_norm_rows(x.data(), n, E, w.ffn_norm.data(), arch_.rms_eps, xn.data());
    matmul(pool, w.w_gate, xn.data(), n, gate.data());
    matmul(pool, w.w_up, xn.data(), n, up.data());
    for (size_t i = 0; i < gate.size(); ++i) {
      const float g = gate[i];
      gate[i] = g / (1.0f + std::exp(-g)) * up[i];  // SiLU(gate) * up
    }
    matmul(pool, w.w_down, gate.data(), n, proj.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  }

  const int first = all_logits ? 0 : n - 1;
  const int rows = n - first;
  rms_norm_rows(x.data() + static_cast<size_t>(first) * E, rows, E, output_norm_.data(), arch_.rms_eps, xn.data());
  matmul(pool, output_, xn.data(), rows, logits);
}

}  // namespace kvgate::runtime
