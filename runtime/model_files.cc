#include "runtime/model_files.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/hash.h"
#include "runtime/hf_checkpoint.h"
#include "runtime/synthetic_model.h"

namespace kvgate::runtime {

const char* model_format_name(ModelFormat format) { return format == ModelFormat::hf ? "hf" : "gguf"; }

std::unique_ptr<ModelFiles> ModelFiles::open(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return std::make_unique<HfCheckpoint>(path);
  return std::make_unique<GgufModelFiles>(path);
}

const ModelTensor* ModelFiles::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string ModelFiles::sha256() const {
  if (files_read_.size() == 1 && files_read_.front() == path_) return sha256_file_hex(path_);
  std::vector<std::string> names = files_read_;
  std::sort(names.begin(), names.end());
  std::string lines;
  for (const std::string& f : names)
    lines += std::filesystem::path(f).filename().string() + " " + sha256_file_hex(f) + "\n";
  return sha256_hex(lines.data(), lines.size());
}

uint64_t ModelFiles::weight_bytes() const {
  uint64_t total = 0;
  for (const ModelTensor& t : tensors_) total += t.n_bytes;
  return total;
}

void ModelFiles::add_tensor(ModelTensor t) {
  if (!tensor_index_.emplace(t.name, tensors_.size()).second)
    throw_input_error_at(t.file, t.file_offset, "tensor '" + t.stored_name + "' maps to '" + t.name +
                                                    "', which another tensor of the model already has");
  tensors_.push_back(std::move(t));
}

GgufModelFiles::GgufModelFiles(const std::string& path) : file_(GgufFile::open(path)) {
  path_ = path;
  file_bytes_ = file_.file_size();
  files_read_ = {path};
  arch_ = read_model_arch(file_);
  options_.final_logit_softcap = file_.get_f32(arch_.arch + ".final_logit_softcapping").value_or(0.0f);
  for (const GgufTensor& g : file_.tensors()) {
    ModelTensor t;
    t.name = std::string(g.name);
    t.stored_name = t.name;
    t.file = path;
    t.type = g.type;
    t.n_dims = g.n_dims;
    t.dims = g.dims;
    t.n_elements = g.n_elements;
    t.n_bytes = g.n_bytes;
    t.file_offset = g.file_offset;
    t.data = g.data;
    add_tensor(std::move(t));
  }
}

Tokenizer GgufModelFiles::tokenizer() const { return Tokenizer::from_gguf(file_); }
ChatTemplate GgufModelFiles::chat_template() const { return ChatTemplate::from_gguf(file_); }
bool GgufModelFiles::synthetic() const { return is_synthetic(file_); }

std::string GgufModelFiles::synthetic_description() const {
  return std::string(file_.get_string("kvgate.synthetic.shape").value_or("?")) + ", " +
         std::string(file_.get_string("kvgate.synthetic.weights").value_or("?")) + " weights, seed " +
         std::to_string(file_.get_u32("kvgate.synthetic.seed").value_or(0));
}

}  // namespace kvgate::runtime
