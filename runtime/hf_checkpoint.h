#pragma once
// A Hugging Face model directory as ModelFiles (model_files.h): config.json for the shape and
// options, model.safetensors or the shards model.safetensors.index.json lists (memory-mapped,
// weights kept in their stored F32/F16/BF16), tokenizer.json with tokenizer_config.json
// (hf_tokenizer.h), the chat template (chat_template.jinja or tokenizer_config.json's), and the
// end-of-generation ids of generation_config.json and config.json.
//
// Supported: model_type llama (Llama 2/3.x; rope scaling default, linear, llama3), mistral
// (sliding_window honoured as transformers does), qwen2, qwen3, gemma3_text. Tensors are mapped
// by their Hugging Face names onto the runtime's; Llama and Mistral keep Hugging Face's
// rotate-half RoPE layout (RopeLayout::halves) instead of GGUF's permuted Q/K rows. Every
// config.json key is either read, checked to have a value that does not change the forward pass,
// or known not to change it (docs/models.md lists them); anything else — another architecture,
// rope types yarn/longrope/dynamic, mixture-of-experts keys, a quantization_config (GPTQ, AWQ,
// compressed-tensors, fp8, bitsandbytes), an unknown key, a tensor the forward would not use, a
// dtype other than F32/F16/BF16, a missing shard — is an input error naming the file and key.
#include <string>
#include <vector>

#include "runtime/model_files.h"
#include "runtime/safetensors.h"

namespace kvgate::runtime {

class HfCheckpoint final : public ModelFiles {
 public:
  explicit HfCheckpoint(const std::string& dir);
  ModelFormat format() const override { return ModelFormat::hf; }
  Tokenizer tokenizer() const override;
  ChatTemplate chat_template() const override;
  bool synthetic() const override { return !synthetic_.empty(); }
  std::string synthetic_description() const override { return synthetic_; }

  // config.json's model_type ("llama", "mistral", "qwen2", "qwen3", "gemma3_text").
  const std::string& model_type() const { return model_type_; }
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  // End-of-generation ids: generation_config.json's eos_token_id (one or a list), else
  // config.json's.
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }

 private:
  void read_config();
  void read_shards();
  void map_tensors();

  std::string dir_;
  std::string model_type_;
  bool tied_embeddings_ = false;
  std::string synthetic_;  // "shape, weights, seed" when made by kvgate model synth
  std::vector<int32_t> eos_ids_;
  std::vector<SafetensorsFile> shards_;
};

// The Hugging Face tensor name of a runtime tensor name for `model_type` (inverse of the
// loader's mapping; `kvgate model synth --format hf` writes these). Empty when there is none.
std::string hf_tensor_name(const std::string& runtime_name, const std::string& model_type);

}  // namespace kvgate::runtime
