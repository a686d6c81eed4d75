#pragma once
// What a model is loaded from: a GGUF file, or a Hugging Face model directory (config.json,
// safetensors shards, tokenizer.json, tokenizer_config.json, generation_config.json). Both give
// the runtime one view — the architecture (ModelArch), every tensor under the runtime's names
// (GGUF's: blk.0.attn_q.weight) in its stored type, memory-mapped, the tokenizer and the chat
// template — so Model, the model commands and the weights axis never ask which format it was.
// A format is one implementation: GGUF here (model_files.cc), Hugging Face in hf_checkpoint.cc.
//
//   std::unique_ptr<ModelFiles> f = ModelFiles::open(path);   // a directory: Hugging Face
//   const ModelTensor* q = f->find_tensor("blk.0.attn_q.weight");
//   Tokenizer tok = f->tokenizer();
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/chat_template.h"
#include "runtime/gguf.h"
#include "runtime/tokenizer.h"

namespace kvgate::runtime {

enum class ModelFormat : uint8_t { gguf, hf };
const char* model_format_name(ModelFormat format);  // "gguf", "hf"

// A tensor as the runtime names it, wherever it is stored.
struct ModelTensor {
  std::string name;         // the runtime's (GGUF) name
  std::string stored_name;  // the name in its file (HF: model.layers.0.self_attn.q_proj.weight)
  std::string file;         // the file holding it, for errors
  GgmlType type = GgmlType::F32;
  uint32_t n_dims = 0;
  std::array<uint64_t, 4> dims{1, 1, 1, 1};  // ggml order: dims[0] is the contiguous row length
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  uint64_t file_offset = 0;  // absolute offset of the data in `file`
  const uint8_t* data = nullptr;
};

// What the forward pass takes from the files beyond the shape (ModelArch).
struct ForwardOptions {
  // Per-frequency divisors of the global layers' RoPE (Llama 3.1+ scaling); empty: none, or a
  // GGUF's rope_freqs.weight tensor, which the loader reads as a tensor.
  std::vector<float> rope_factors;
  float final_logit_softcap = 0.0f;   // 0: none
  float query_pre_attn_scalar = 0.0f; // Gemma: queries scaled by its 1/sqrt; 0: the architecture's rule
  // Added to every RMSNorm weight as it is read: Hugging Face's Gemma stores w for (1 + w),
  // GGUF files already hold 1 + w.
  float norm_weight_offset = 0.0f;
};

class ModelFiles {
 public:
  virtual ~ModelFiles() = default;
  // A directory is a Hugging Face model directory, anything else a GGUF file. Input errors name
  // the file and the problem (exit 2); unsupported architectures and options in a Hugging Face
  // config are refused here, naming the key.
  static std::unique_ptr<ModelFiles> open(const std::string& path);

  virtual ModelFormat format() const = 0;
  const std::string& path() const { return path_; }
  const ModelArch& arch() const { return arch_; }
  const ForwardOptions& options() const { return options_; }
  // Tensors in file order (shard by shard for Hugging Face).
  const std::vector<ModelTensor>& tensors() const { return tensors_; }
  const ModelTensor* find_tensor(std::string_view name) const;
  // Bytes of every file the model is read from (all shards, or the GGUF).
  uint64_t file_bytes() const { return file_bytes_; }
  // Bytes of the tensors' data.
  uint64_t weight_bytes() const;

  virtual Tokenizer tokenizer() const = 0;
  virtual ChatTemplate chat_template() const = 0;
  // Made by `kvgate model synth` (random weights).
  virtual bool synthetic() const = 0;
  // "shape, weights, seed" of a synthetic model, for model info.
  virtual std::string synthetic_description() const { return ""; }
  // SHA-256 identifying the model's bytes: the GGUF file's, or for a directory the SHA-256 of
  // "NAME SHA256\n" lines of every file it is read from, sorted by name.
  std::string sha256() const;
  // The GGUF file, for what only a GGUF has (its metadata); null for other formats.
  virtual const GgufFile* gguf() const { return nullptr; }

 protected:
  void add_tensor(ModelTensor t);

  std::string path_;
  ModelArch arch_;
  ForwardOptions options_;
  std::vector<ModelTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
  uint64_t file_bytes_ = 0;
  std::vector<std::string> files_read_;  // every file the model is read from
};

// The GGUF implementation: tensors and metadata as the file has them.
class GgufModelFiles final : public ModelFiles {
 public:
  explicit GgufModelFiles(const std::string& path);
  ModelFormat format() const override { return ModelFormat::gguf; }
  Tokenizer tokenizer() const override;
  ChatTemplate chat_template() const override;
  bool synthetic() const override;
  std::string synthetic_description() const override;
  const GgufFile* gguf() const override { return &file_; }

 private:
  GgufFile file_;
};

}  // namespace kvgate::runtime
