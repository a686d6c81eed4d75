#pragma once
// A minimal GGUF writer for tests: builds valid files value by value, and exposes the raw byte
// appenders so malformed files can be built on purpose. Header-only and dependency-free, so the
// end-to-end tests can write files for the real binary too.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::testing {

// Value type numbers from the GGUF specification (duplicated on purpose: the tests check the
// reader against the specification, not against the reader's own enum).
enum GgufTypeNumber : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
// ggml tensor type numbers used by the tests.
enum GgmlTypeNumber : uint32_t { kTF32 = 0, kTF16 = 1, kTQ4_0 = 2, kTQ4_1 = 3, kTQ8_0 = 8, kTQ6_K = 14, kTBF16 = 30 };

class ByteBuffer {
 public:
  template <class T>
  ByteBuffer& put(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    bytes_.insert(bytes_.end(), b, b + sizeof(T));
    return *this;
  }
  ByteBuffer& put_string(std::string_view s) {
    put<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  ByteBuffer& put_bytes(const std::vector<uint8_t>& b) {
    bytes_.insert(bytes_.end(), b.begin(), b.end());
    return *this;
  }
  void pad_to(uint64_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
  }
  std::vector<uint8_t>& bytes() { return bytes_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}

  // One metadata pair whose value bytes the caller writes (after the key and type) into kv().
  ByteBuffer& begin_kv(std::string_view key, uint32_t type) {
    ++kv_count_;
    kv_.put_string(key);
    kv_.put<uint32_t>(type);
    return kv_;
  }
  template <class T>
  void add(std::string_view key, uint32_t type, T value) { begin_kv(key, type).template put<T>(value); }
  void add_string(std::string_view key, std::string_view value) { begin_kv(key, kString).put_string(value); }
  void add_bool(std::string_view key, bool value) { begin_kv(key, kBool).put<uint8_t>(value ? 1 : 0); }
  template <class T>
  void add_array(std::string_view key, uint32_t element_type, const std::vector<T>& values) {
    ByteBuffer& b = begin_kv(key, kArray);
    b.put<uint32_t>(element_type).put<uint64_t>(values.size());
    for (const T& v : values) b.template put<T>(v);
  }
  void add_string_array(std::string_view key, const std::vector<std::string>& values) {
    ByteBuffer& b = begin_kv(key, kArray);
    b.put<uint32_t>(kString).put<uint64_t>(values.size());
    for (const std::string& v : values) b.put_string(v);
  }
  // Sets general.alignment and lays out the data section with it.
  void set_alignment(uint32_t alignment) {
    add<uint32_t>("general.alignment", kU32, alignment);
    alignment_ = alignment;
  }

  // A tensor with the given bytes; offsets are assigned in order, each aligned.
  void add_tensor(std::string_view name, uint32_t type, std::vector<uint64_t> dims, std::vector<uint8_t> data) {
    tensors_.push_back({std::string(name), type, std::move(dims), std::move(data), std::nullopt});
  }
  // A tensor whose stored offset is forced (to build overlapping or out-of-range tensors).
  void add_tensor_at(std::string_view name, uint32_t type, std::vector<uint64_t> dims, uint64_t offset) {
    tensors_.push_back({std::string(name), type, std::move(dims), {}, offset});
  }
  // Extra bytes after the last tensor's data (for forced-offset tensors to point into).
  void append_data(size_t n) { trailing_data_ += n; }

  uint64_t kv_count() const { return kv_count_; }

  std::vector<uint8_t> finish() const {
    ByteBuffer out;
    out.put<uint8_t>('G').put<uint8_t>('G').put<uint8_t>('U').put<uint8_t>('F');
    out.put<uint32_t>(version_);
    out.put<uint64_t>(tensors_.size());
    out.put<uint64_t>(kv_count_);
    out.put_bytes(kv_.bytes());
    uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
      out.put_string(t.name);
      out.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) out.put<uint64_t>(d);
      out.put<uint32_t>(t.type);
      if (t.forced_offset) {
        out.put<uint64_t>(*t.forced_offset);
      } else {
        out.put<uint64_t>(offset);
        offset += t.data.size();
        offset = (offset + alignment_ - 1) / alignment_ * alignment_;
      }
    }
    out.pad_to(alignment_);
    for (const Tensor& t : tensors_) {
      if (t.forced_offset) continue;
      out.pad_to(alignment_);
      out.put_bytes(t.data);
    }
    out.bytes().resize(out.bytes().size() + trailing_data_, 0);
    return out.bytes();
  }

 private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> dims;
    std::vector<uint8_t> data;
    std::optional<uint64_t> forced_offset;
  };
  uint32_t version_;
  uint32_t alignment_ = 32;
  uint64_t kv_count_ = 0;
  ByteBuffer kv_;
  std::vector<Tensor> tensors_;
  size_t trailing_data_ = 0;
};

inline std::vector<uint8_t> pattern_bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = static_cast<uint8_t>(seed + k * 7);
  return v;
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// The metadata of a small Llama-family model: 2 layers, 4 heads, 2 KV heads, embedding 32.
inline void add_tiny_llama_metadata(GgufWriter& w) {
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", "tiny");
  w.add<uint32_t>("llama.block_count", kU32, 2);
  w.add<uint32_t>("llama.context_length", kU32, 256);
  w.add<uint32_t>("llama.embedding_length", kU32, 32);
  w.add<uint32_t>("llama.feed_forward_length", kU32, 64);
  w.add<uint32_t>("llama.attention.head_count", kU32, 4);
  w.add<uint32_t>("llama.attention.head_count_kv", kU32, 2);
  w.add<float>("llama.rope.freq_base", kF32, 10000.0f);
  w.add<float>("llama.attention.layer_norm_rms_epsilon", kF32, 1e-5f);
  w.add_string_array("tokenizer.ggml.tokens", {"<s>", "</s>", "a", "b", "c"});
}

// Every tensor the llama forward reads at add_tiny_llama_metadata's shape (embedding 32, 4 heads
// and 2 KV heads of 8, FFN 64, vocabulary 5, 2 layers), F32: what `generate`, `model info` and
// `capacity` check a file's metadata against. Returns the bytes they hold.
inline uint64_t add_tiny_llama_tensors(GgufWriter& w) {
  uint64_t total = 0;
  uint8_t seed = 1;
  auto add = [&](const std::string& name, std::vector<uint64_t> dims) {
    uint64_t n = 1;
    for (const uint64_t d : dims) n *= d;
    w.add_tensor(name, kTF32, std::move(dims), pattern_bytes(n * 4, seed++));
    total += n * 4;
  };
  add("token_embd.weight", {32, 5});
  add("output_norm.weight", {32});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {32});
    add(p + "attn_q.weight", {32, 32});
    add(p + "attn_k.weight", {32, 16});
    add(p + "attn_v.weight", {32, 16});
    add(p + "attn_output.weight", {32, 32});
    add(p + "ffn_norm.weight", {32});
    add(p + "ffn_gate.weight", {32, 64});
    add(p + "ffn_up.weight", {32, 64});
    add(p + "ffn_down.weight", {64, 32});
  }
  return total;
}

}  // namespace kvgate::testing
