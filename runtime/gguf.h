#pragma once
// GGUF (v2 and v3, little-endian) reader. A model file is untrusted input: every count, length,
// offset and size is checked against the bytes that are actually there before anything is
// allocated or dereferenced, so a malformed or truncated file is a kvgate::Error of kind input
// ("FILE: at byte N: problem", exit code 2), never a crash or a huge allocation.
//
// Nothing is copied: strings, scalar arrays and tensor data are views into the mapped file
// (or into the caller's buffer for GgufFile::parse), valid for the lifetime of the GgufFile.
//
//   GgufFile f = GgufFile::open(path);
//   uint32_t layers = f.get_u32("llama.block_count").value_or(0);
//   const GgufTensor* w = f.find_tensor("blk.0.attn_q.weight");   // w->data, w->n_bytes
//   ModelArch arch = read_model_arch(f);
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/mapped_file.h"

namespace kvgate::runtime {

// Metadata value types, numbered as in the GGUF specification.
enum class GgufValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
const char* value_type_name(GgufValueType type);

// Tensor storage types, numbered as in ggml. Gaps are types ggml has removed.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

// One row of ggml's type traits: a tensor row of this type is stored as whole blocks of
// block_size elements, each block_bytes long.
struct GgmlTypeTraits {
  GgmlType type;
  const char* name;
  uint32_t block_size;
  uint32_t block_bytes;
};
// Every type the reader knows, in ggml's numbering order; tests and reports iterate this.
std::span<const GgmlTypeTraits> ggml_type_table();
// nullptr for a type number ggml does not define (or has removed).
const GgmlTypeTraits* find_ggml_type(uint32_t type_number);
const char* ggml_type_name(GgmlType type);

class GgufValue;

// An array value. Elements of a fixed-size scalar type stay as little-endian bytes in the file
// and are decoded on access; strings and nested arrays are indexed once at parse time.
struct GgufArray {
  GgufValueType element_type = GgufValueType::u8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;               // fixed-size scalar elements, count of them
  std::vector<std::string_view> strings;      // element_type == string
  std::vector<GgufValue> arrays;              // element_type == array
};

class GgufValue {
 public:
  GgufValueType type() const { return type_; }
  uint64_t file_offset() const { return offset_; }  // where the value's bytes start

  bool is_integer() const;
  bool is_float() const { return type_ == GgufValueType::f32 || type_ == GgufValueType::f64; }
  // Integer value of any integer type; nullopt for other types or values out of range.
  std::optional<uint64_t> as_uint() const;
  std::optional<int64_t> as_int() const;
  // f32 or f64 value; nullopt for other types.
  std::optional<double> as_float() const;
  std::optional<bool> as_bool() const;
  std::optional<std::string_view> as_string() const;
  const GgufArray* as_array() const { return type_ == GgufValueType::array ? array_.get() : nullptr; }

  // Element i (< count) of a scalar array, widened: integers, floats and bools only.
  static std::optional<uint64_t> array_uint(const GgufArray& a, uint64_t i);
  static std::optional<double> array_float(const GgufArray& a, uint64_t i);

 private:
  friend class GgufParser;
  GgufValueType type_ = GgufValueType::u8;
  uint64_t offset_ = 0;
  union {
    uint64_t u;
    int64_t i;
    double f;
  } scalar_{0};
  std::string_view string_;
  // shared_ptr keeps GgufValue cheap to move and copy in the nested-array vectors.
  std::shared_ptr<const GgufArray> array_;
};

struct GgufTensor {
  std::string_view name;
  GgmlType type = GgmlType::F32;
  uint32_t n_dims = 0;
  std::array<uint64_t, 4> dims{1, 1, 1, 1};  // ggml order: dims[0] is the contiguous row length
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  uint64_t data_offset = 0;  // relative to the data section, as stored in the file
  uint64_t file_offset = 0;  // absolute byte offset of the tensor's data in the file
  const uint8_t* data = nullptr;
};

class GgufFile {
 public:
  // Maps and validates a file. Errors name `path`.
  static GgufFile open(const std::string& path);
  // Validates a buffer that the caller keeps alive as long as the returned GgufFile (fuzzing,
  // tests). Errors name `name`.
  static GgufFile parse(std::span<const uint8_t> bytes, const std::string& name);

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  const std::string& name() const { return name_; }
  uint64_t file_size() const { return bytes_.size(); }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_section_offset() const { return data_offset_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string_view, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;

  // Typed lookups: nullopt (nullptr) when the key is absent; an input error naming the key when
  // it is present with a type that cannot represent the request (e.g. a string for get_u32, or
  // a negative i32). Integer getters accept any integer type whose value fits.
  std::optional<uint32_t> get_u32(std::string_view key) const;
  std::optional<uint64_t> get_u64(std::string_view key) const;
  std::optional<int64_t> get_i64(std::string_view key) const;
  std::optional<float> get_f32(std::string_view key) const;  // f32, or f64 narrowed
  std::optional<double> get_f64(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;
  const GgufArray* get_array(std::string_view key) const;

  // Tensors in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;

 private:
  friend class GgufParser;
  GgufFile() = default;
  [[noreturn]] void fail_key(std::string_view key, const GgufValue& v, const char* wanted) const;

  std::unique_ptr<MappedFile> mapping_;  // null for parse(); heap-held so views survive moves
  std::span<const uint8_t> bytes_;
  std::string name_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string_view, GgufValue>> metadata_;
  std::unordered_map<std::string_view, size_t> metadata_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

// How RoPE pairs a head's dimensions: ggml's "normal" rotation of adjacent pairs (x[2i], x[2i+1]),
// used by Llama GGUFs (whose converter permutes Q/K for it), or GPT-NeoX's rotation of the two
// halves (x[i], x[i + n_rot/2]), used by Qwen2, Qwen3 and Gemma 3 (llama_model_rope_type).
enum class RopeLayout : uint8_t { adjacent_pairs, halves };

// The shape of a decoder model as the runtime and the capacity planner need it.
struct ModelArch {
  std::string arch;  // general.architecture, e.g. "llama"
  std::string name;  // general.name, empty if absent
  uint32_t n_layers = 0;
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;    // key length per head
  uint32_t head_dim_v = 0;  // value length per head (equal to head_dim in Llama models)
  uint32_t n_embd = 0;
  uint32_t n_ff = 0;
  uint32_t n_vocab = 0;
  uint32_t n_ctx_train = 0;
  uint32_t n_rot = 0;  // rotary dimensions per head (head_dim unless the file says otherwise)
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  RopeLayout rope_layout = RopeLayout::adjacent_pairs;
  // rope.scaling.type: "none" or "linear" (others are read but the runtime refuses them), and
  // the linear scale 1 / rope.scaling.factor that multiplies every rotation angle.
  std::string rope_scaling = "none";
  float rope_freq_scale = 1.0f;
  // Sliding-window attention (Gemma 2/3): a query at position p on a sliding-window layer sees
  // keys at positions p - sliding_window < q <= p (llama.cpp's LLAMA_SWA_TYPE_STANDARD), and
  // that layer's RoPE uses rope_base_swa. Empty layer_swa: every layer is global.
  uint32_t sliding_window = 0;
  std::vector<bool> layer_swa;  // [n_layers]
  float rope_base_swa = 10000.0f;

  bool is_swa(uint32_t layer) const { return layer < layer_swa.size() && layer_swa[layer]; }
  uint32_t n_swa_layers() const {
    uint32_t n = 0;
    for (bool b : layer_swa) n += b ? 1u : 0u;
    return n;
  }

  // K and V bytes one token occupies in the cache across all layers at the given element size
  // (every layer full; for sliding-window models this is the cost of a token inside the window).
  uint64_t kv_bytes_per_token(double bytes_per_element) const {
    return static_cast<uint64_t>(static_cast<double>(n_layers) * n_kv_heads * (head_dim + head_dim_v) *
                                 bytes_per_element);
  }
  // K and V bytes one sequence of `context` tokens holds: global layers keep every token,
  // sliding-window layers at most sliding_window of them.
  uint64_t kv_bytes_for_context(double bytes_per_element, uint64_t context) const {
    const uint64_t local = std::min<uint64_t>(context, sliding_window);
    const double tokens = static_cast<double>(n_layers - n_swa_layers()) * static_cast<double>(context) +
                          static_cast<double>(n_swa_layers()) * static_cast<double>(local);
    return static_cast<uint64_t>(tokens * n_kv_heads * (head_dim + head_dim_v) * bytes_per_element);
  }
};

// Reads `<arch>.*` hyper-parameters. Missing required keys or inconsistent values (heads not
// dividing the embedding, KV heads not dividing heads) are input errors naming the file and key.
ModelArch read_model_arch(const GgufFile& file);

}  // namespace kvgate::runtime
