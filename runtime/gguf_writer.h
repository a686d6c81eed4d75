#pragma once
// A GGUF v3 writer for the files kvgate itself makes (`kvgate model synth`): metadata pairs,
// tensor descriptions, then the data section streamed tensor by tensor, so a model of many
// gigabytes is never held in memory. The file appears only once it is complete (written under a
// temporary name, then renamed): a failure leaves no half-written model behind.
//
//   GgufWriter w;
//   w.add_string("general.architecture", "llama");
//   w.copy_value("tokenizer.ggml.tokens", *source.find("tokenizer.ggml.tokens"));
//   w.add_tensor("token_embd.weight", GgmlType::F16, {n_embd, n_vocab});
//   w.write(path, [](size_t tensor, uint64_t offset, std::span<uint8_t> out) { ... fill out ... });
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gguf.h"

namespace kvgate::runtime {

class GgufWriter {
 public:
  void add_u32(std::string_view key, uint32_t value);
  void add_f32(std::string_view key, float value);
  void add_bool(std::string_view key, bool value);
  void add_string(std::string_view key, std::string_view value);
  // A metadata value of another file, copied with its type: scalars, strings, and arrays of
  // either (a nested array is an input error naming the key).
  void copy_value(std::string_view key, const GgufValue& value);

  // A tensor of `type` with dims in ggml order (dims[0] the contiguous row length, a whole
  // number of the type's blocks; usage error otherwise). Returns its index for write()'s fill.
  size_t add_tensor(std::string_view name, GgmlType type, std::vector<uint64_t> dims);
  uint64_t tensor_bytes(size_t tensor) const { return tensors_.at(tensor).bytes; }
  uint64_t data_bytes() const;  // the data section, alignment padding included

  // fill(tensor, offset, out) writes bytes [offset, offset + out.size()) of a tensor's data;
  // it is called with consecutive chunks of whole blocks of each tensor in turn. Environment error naming the
  // path when the file cannot be written.
  using Fill = std::function<void(size_t tensor, uint64_t offset, std::span<uint8_t> out)>;
  void write(const std::string& path, const Fill& fill) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> dims;
    uint64_t bytes;
  };
  std::vector<uint8_t>& begin_kv(std::string_view key, GgufValueType type);
  uint64_t kv_count_ = 0;
  std::vector<uint8_t> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace kvgate::runtime
