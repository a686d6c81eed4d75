#pragma once
// A Llama-family decoder (RMSNorm, RoPE, GQA attention, SwiGLU, tied or separate output head)
// over weights kept in their GGUF types, with its KV cache in kvgate's paged cache so every
// token's K/V is stored in the format under test and attention reads the quantized pages.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kv_config.h"
#include "kernels/paged_kv_cache.h"
#include "runtime/gguf.h"
#include "runtime/weights.h"

namespace kvgate::runtime {

struct LayerWeights {
  std::vector<float> attn_norm;  // [n_embd]
  WeightMatrix wq, wk, wv, wo;   // [n_heads*hd][n_embd], [n_kv*hd][n_embd] x2, [n_embd][n_heads*hd]
  std::vector<float> ffn_norm;   // [n_embd]
  WeightMatrix w_gate, w_up, w_down;  // [n_ff][n_embd] x2, [n_embd][n_ff]
};

class Model {
 public:
  // Maps the file and checks that every tensor the forward needs is present with the shape
  // the metadata implies; a missing or misshapen tensor is an input error naming it.
  static std::unique_ptr<Model> load(const std::string& path);

  const ModelArch& arch() const { return arch_; }
  const GgufFile& gguf() const { return gguf_; }
  const std::string& path() const { return path_; }
  uint64_t weight_bytes() const { return weight_bytes_; }

  // The weights as loaded, for backends that keep their own copy (runtime/gpu_model.h).
  const WeightMatrix& token_embedding() const { return token_embd_; }
  const WeightMatrix& output() const { return output_; }  // token_embedding() when tied
  const std::vector<float>& output_norm() const { return output_norm_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  const std::vector<float>& rope_inv_freq() const { return rope_inv_freq_; }  // [n_rot / 2]

  // Builds an empty cache for `config` sized for `max_tokens` tokens over all sequences.
  std::unique_ptr<kernels::PagedKvCache> make_cache(const kernels::KvConfig& config, int64_t max_tokens) const;

  // Runs `tokens` at positions [cache length, +n) of sequence `seq`, appending their K/V in
  // every layer. logits: [n][n_vocab] when all_logits, else [1][n_vocab] for the last token.
  void forward(ThreadPool& pool, kernels::PagedKvCache& cache, kernels::SeqId seq, std::span<const int32_t> tokens,
               bool all_logits, float* logits) const;

 private:
  Model(GgufFile gguf, std::string path) : gguf_(std::move(gguf)), path_(std::move(path)) {}
  void embed(int32_t token, float* out) const;

  GgufFile gguf_;
  std::string path_;
  ModelArch arch_;
  WeightMatrix token_embd_;
  WeightMatrix output_;  // token_embd_ when the embeddings are tied
  std::vector<float> output_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<float> rope_inv_freq_;  // [n_rot / 2]
  uint64_t weight_bytes_ = 0;
};

}  // namespace kvgate::runtime
