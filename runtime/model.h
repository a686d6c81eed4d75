#pragma once
// A decoder-only transformer over weights kept in their stored types (GGUF or safetensors), with its KV cache in
// kvgate's paged cache so every token's K/V is stored in the format under test and attention
// reads the quantized pages. One forward function covers the architectures whose graphs
// differ only in optional pieces (llama.cpp's src/models/*.cpp):
//
//   llama  (Llama 2/3.x, Mistral, SmolLM): RMSNorm, RoPE on adjacent pairs (rope_freqs.weight
//          factors for Llama 3.1+, linear rope scaling), GQA, SwiGLU, optional biases
//   qwen2  (Qwen2, Qwen2.5): llama + Q/K/V bias, RoPE on halves
//   qwen3  : llama + per-head RMSNorm of Q and K before RoPE, RoPE on halves
//   gemma3 : embeddings scaled by sqrt(n_embd), per-head Q/K RMSNorm, RoPE on halves with a
//            separate base on sliding-window layers, 5 sliding-window layers to 1 global,
//            norms after attention and after the FFN (sandwich), GeGLU (tanh GELU),
//            query scale 1/sqrt(head_dim), optional final logit soft-capping
//
// Anything else — another architecture, a tensor the forward would not use (experts, fused
// QKV, extra projections), an unsupported RoPE scaling — is an input error naming it, never a
// forward pass that silently ignores part of the model.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kv_config.h"
#include "kernels/paged_kv_cache.h"
#include "runtime/gguf.h"
#include "runtime/model_files.h"
#include "runtime/weights.h"

namespace kvgate::runtime {

struct LayerWeights {
  std::vector<float> attn_norm;  // [n_embd]
  WeightMatrix wq, wk, wv, wo;   // [n_heads*hd][n_embd], [n_kv*hd][n_embd] x2, [n_embd][n_heads*hd]
  std::vector<float> ffn_norm;   // [n_embd]
  WeightMatrix w_gate, w_up, w_down;  // [n_ff][n_embd] x2, [n_embd][n_ff]
  // Optional pieces; empty when the architecture or the file has none.
  std::vector<float> bq, bk, bv, bo;             // biases of wq, wk, wv, wo
  std::vector<float> b_gate, b_up, b_down;       // biases of the FFN matrices
  std::vector<float> q_norm, k_norm;             // [head_dim] per-head RMSNorm weights
  std::vector<float> post_attn_norm, post_ffn_norm;  // [n_embd] sandwich norms (Gemma)
};

enum class FfnActivation : uint8_t { silu, gelu_tanh };

// What the forward pass does beyond a plain Llama block, decided from the architecture and the
// tensors present.
struct ForwardFeatures {
  float embedding_scale = 1.0f;  // Gemma: sqrt(n_embd)
  FfnActivation activation = FfnActivation::silu;
  float attention_scale = 0.0f;  // 0: 1/sqrt(head_dim)
  float final_logit_softcap = 0.0f;
  bool sliding_window = false;   // some layers attend to a window only (ModelArch::layer_swa)
};

// A model's KV storage: full-attention layers in one paged cache, sliding-window layers (if
// any) in a second one whose shape keeps only the window, so their old pages are freed.
// Sequence ids are the same in both (every operation is applied to both in the same order).
class ModelKvCache {
 public:
  ModelKvCache(std::unique_ptr<kernels::PagedKvCache> full, std::unique_ptr<kernels::PagedKvCache> local,
               std::vector<int> cache_layer, std::vector<bool> layer_is_local);
  kernels::SeqId create_sequence();
  kernels::SeqId fork(kernels::SeqId parent, int64_t n_tokens);
  void release(kernels::SeqId seq);
  int64_t length(kernels::SeqId seq) const;
  // The cache holding model layer `layer`, and the layer's index in it.
  kernels::PagedKvCache& cache_of(int layer);
  const kernels::PagedKvCache& cache_of(int layer) const;
  int index_in_cache(int layer) const { return cache_layer_.at(static_cast<size_t>(layer)); }
  kernels::PagedKvCache& full() { return *full_; }
  kernels::PagedKvCache* local() { return local_.get(); }  // null without sliding-window layers
  // Bytes of pages in use plus the format windows, both caches.
  size_t used_bytes() const;
  // The config's engine (`@engine=`): llama.cpp also rounds every matmul's input (Model::forward).
  kernels::Arithmetic arithmetic() const { return arithmetic_; }
  void set_arithmetic(kernels::Arithmetic arithmetic) { arithmetic_ = arithmetic; }

 private:
  std::unique_ptr<kernels::PagedKvCache> full_, local_;
  kernels::Arithmetic arithmetic_ = kernels::Arithmetic::exact;
  std::vector<int> cache_layer_;
  std::vector<bool> layer_is_local_;
};

// The bytes of a Q or K projection whose rows are laid out for RoPE on halves of each head of
// `head_dim` (Hugging Face's rotate_half), reordered for RoPE on adjacent pairs (GGUF's layout,
// llama.cpp's convert permutation): row 2i of a head takes row i, row 2i+1 row i + head_dim/2.
// The products then come out in the adjacent-pairs order, and attention's dot products of Q with
// K, reordered alike, are unchanged.
std::vector<uint8_t> rows_for_adjacent_pairs(const WeightMatrix& w, int head_dim);

class Model {
 public:
  // Maps the model (a GGUF file or a Hugging Face directory, model_files.h) and checks that
  // every tensor the forward needs is present with the shape the metadata implies and that no
  // tensor is left unused; a missing or misshapen tensor, an unknown architecture or an
  // unsupported hyper-parameter is an input error naming it.
  static std::unique_ptr<Model> load(const std::string& path);
  static std::unique_ptr<Model> load(std::unique_ptr<ModelFiles> files);

  const ModelArch& arch() const { return arch_; }
  const ForwardFeatures& features() const { return features_; }
  // What the model was read from: its tokenizer, chat template, tensors and format.
  const ModelFiles& files() const { return *files_; }
  const std::string& path() const { return files_->path(); }
  uint64_t weight_bytes() const { return weight_bytes_; }

  // The weights as loaded, for backends that keep their own copy (runtime/gpu_model.h).
  const WeightMatrix& token_embedding() const { return token_embd_; }
  const WeightMatrix& output() const { return output_; }  // token_embedding() when tied
  const std::vector<float>& output_norm() const { return output_norm_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  // [n_rot / 2] rotation frequencies of the global layers, rope factors and linear scaling
  // folded in; sliding-window layers use rope_inv_freq_swa().
  const std::vector<float>& rope_inv_freq() const { return rope_inv_freq_; }
  const std::vector<float>& rope_inv_freq_swa() const { return rope_inv_freq_swa_; }
  // True when the forward is exactly the plain Llama block (what the GPU backend implements):
  // no biases, Q/K norms, sandwich norms, embedding scale, GELU, soft-cap, sliding window, or
  // RoPE on halves of part of a head. RoPE on the halves of the whole head (a Hugging Face
  // Llama) counts: it is RoPE on adjacent pairs of Q/K rows reordered by
  // rows_for_adjacent_pairs, which a backend does once as it copies the weights. Otherwise `why`
  // names the first feature that is not.
  bool is_plain_llama(std::string* why = nullptr) const;

  // Builds an empty cache for `config` sized for `max_tokens` tokens over all sequences.
  std::unique_ptr<ModelKvCache> make_cache(const kernels::KvConfig& config, int64_t max_tokens) const;

  // Runs `tokens` at positions [cache length, +n) of sequence `seq`, appending their K/V in
  // every layer. logits: [n][n_vocab] when all_logits, else [1][n_vocab] for the last token.
  void forward(ThreadPool& pool, ModelKvCache& cache, kernels::SeqId seq, std::span<const int32_t> tokens,
               bool all_logits, float* logits) const;

 private:
  explicit Model(std::unique_ptr<ModelFiles> files) : files_(std::move(files)) {}
  void embed(int32_t token, float* out) const;

  std::unique_ptr<ModelFiles> files_;
  ModelArch arch_;
  ForwardFeatures features_;
  WeightMatrix token_embd_;
  WeightMatrix output_;  // token_embd_ when the embeddings are tied
  std::vector<float> output_norm_;
  std::vector<float> output_bias_;  // [n_vocab], Qwen2 files may have one
  std::vector<LayerWeights> layers_;
  std::vector<float> rope_inv_freq_;      // [n_rot / 2]
  std::vector<float> rope_inv_freq_swa_;  // [n_rot / 2]
  uint64_t weight_bytes_ = 0;
};

}  // namespace kvgate::runtime
