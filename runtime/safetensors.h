#pragma once
// safetensors reader (https://github.com/huggingface/safetensors: an 8-byte little-endian header
// length, a JSON header, then the raw tensor bytes). Like the GGUF reader, the file is untrusted:
// the header length, every dtype, shape and data offset is checked against the bytes that are
// there before anything is used, so a truncated or malformed shard is an input error naming the
// file, the byte offset and the problem (exit 2), never a crash. The JSON is nlohmann's; only the
// layout checks are written here. Nothing is copied: tensor data are views into the mapped file.
//
//   SafetensorsFile f = SafetensorsFile::open("model-00001-of-00004.safetensors");
//   const SafetensorsTensor* t = f.find("model.embed_tokens.weight");   // t->dtype, t->shape, t->data
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/mapped_file.h"

namespace kvgate::runtime {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;            // as stored: "BF16", "F16", "F32", "I32", "F8_E4M3", ...
  uint32_t element_bytes = 0;   // of the dtype (F4 and other sub-byte types are refused)
  std::vector<uint64_t> shape;  // row-major: shape.back() is the contiguous row length
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  uint64_t file_offset = 0;     // absolute offset of the data in the file
  const uint8_t* data = nullptr;
};

class SafetensorsFile {
 public:
  // Maps and validates a file. Errors name `path`.
  static SafetensorsFile open(const std::string& path);
  // Validates a buffer the caller keeps alive as long as the result (tests, fuzzing).
  static SafetensorsFile parse(std::span<const uint8_t> bytes, const std::string& name);

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  const std::string& name() const { return name_; }
  uint64_t file_size() const { return bytes_.size(); }
  uint64_t header_bytes() const { return header_bytes_; }  // the JSON's length
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // in data order
  const SafetensorsTensor* find(std::string_view name) const;
  // The header's "__metadata__" string map (e.g. format: pt); empty when absent.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  void validate();

  std::unique_ptr<MappedFile> mapping_;  // heap-held so views survive moves
  std::span<const uint8_t> bytes_;
  std::string name_;
  uint64_t header_bytes_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Bytes per element of a safetensors dtype name; 0 for a name the format does not define or a
// sub-byte type.
uint32_t safetensors_dtype_bytes(std::string_view dtype);

}  // namespace kvgate::runtime
