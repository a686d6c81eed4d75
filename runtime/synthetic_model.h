#pragma once
// Models with random weights at the shapes users run (Llama 3.1 8B/70B, Qwen3 8B, ...), for
// measuring speed where the real weights cannot be had (`kvgate model synth`, docs/models.md).
// The file is a GGUF the runtime loads like any other, with a real tokenizer (copied from
// another GGUF, by default the default model's) so prompts tokenize, and marked
// `kvgate.synthetic = true`: its logits are noise, so `eval` and `replay` refuse it unless told
// (--allow-synthetic), and `model info` says so.
//
// The weights are deterministic: the same shape, weight type, seed and tokenizer give the same
// bytes. Each tensor's bytes come from its own stream (seed and tensor name), so they do not
// depend on the order tensors are written in.
#include <cstdint>
#include <span>
#include <string>

#include "runtime/gguf.h"

namespace kvgate::runtime {

struct SyntheticShape {
  std::string name;  // e.g. "llama-3.1-8b"
  std::string arch;  // general.architecture: llama, qwen2 or qwen3
  uint32_t n_layers = 0, n_embd = 0, n_heads = 0, n_kv_heads = 0, n_ff = 0, n_ctx = 0;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
};

// The shapes `--shape` names (the published configurations of those models; "tiny" is a
// 2-layer model for tests).
std::span<const SyntheticShape> synthetic_shapes();

// "NAME" or "NAME-layers=N" (the first N layers only, e.g. llama-3.1-70b-layers=8). Usage error
// listing the shapes for an unknown name or a layer count outside 1..the model's.
SyntheticShape parse_synthetic_shape(const std::string& spec);

// The weight types `--weights` takes: f16, q8_0, q4_0, q4_k. Usage error otherwise.
GgmlType parse_synthetic_weights(const std::string& name);

struct SyntheticModel {
  SyntheticShape shape;
  GgmlType weights = GgmlType::F16;  // every matrix, embeddings and output included; norms F32
  uint32_t seed = 0;
  std::string tokenizer_from;  // a GGUF whose tokenizer.* metadata is copied
};

struct SyntheticSummary {
  uint64_t file_bytes = 0;
  uint64_t weight_bytes = 0;  // tensor data
  uint32_t n_vocab = 0;
  uint64_t n_tensors = 0;
};

// Writes the model to `out` (whole or not at all). Input error for a tokenizer file without
// tokenizer.ggml.tokens; environment error when `out` cannot be written.
SyntheticSummary write_synthetic_model(const SyntheticModel& m, const std::string& out);

// The same model as a Hugging Face directory `out_dir` (`--format hf`): config.json (its
// model_type, shape, and "kvgate_synthetic": {shape, weights, seed, tokenizer}), the matrices in
// model.safetensors as `m.weights` (F16 or BF16; norms F32 ones; Qwen2's Q/K/V biases random
// like the matrices) under Hugging Face's names, and the tokenizer files of the Hugging Face
// directory `m.tokenizer_from` copied (tokenizer.json, tokenizer_config.json, chat_template.jinja,
// generation_config.json). The directory appears whole or not at all (written under
// OUT_DIR.partial, then renamed). Usage error for quantized weights.
SyntheticSummary write_synthetic_model_hf(const SyntheticModel& m, const std::string& out_dir);

// True when the file says it was made by write_synthetic_model (kvgate.synthetic = true).
bool is_synthetic(const GgufFile& file);
inline constexpr const char* kSyntheticKey = "kvgate.synthetic";

}  // namespace kvgate::runtime
