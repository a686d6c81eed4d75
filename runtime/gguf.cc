#include "runtime/gguf.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "core/error.h"
#include "kernels/ggml_blocks.h"

namespace kvgate::runtime {

static_assert(std::endian::native == std::endian::little,
              "the reader decodes little-endian GGUF fields with memcpy");

namespace {

namespace ggml = kernels::ggml;

// ggml's block layouts (elements per block, bytes per block), from the block structs: those of
// kernels/ggml_blocks.h where kvgate decodes the type, the sizes of ggml-common.h's otherwise.
constexpr GgmlTypeTraits kGgmlTypes[] = {
    {GgmlType::F32, "F32", 1, 4},
    {GgmlType::F16, "F16", 1, 2},
    {GgmlType::Q4_0, "Q4_0", ggml::Q4_0::kElems, ggml::Q4_0::kBytes},
    {GgmlType::Q4_1, "Q4_1", ggml::Q4_1::kElems, ggml::Q4_1::kBytes},
    {GgmlType::Q5_0, "Q5_0", ggml::Q5_0::kElems, ggml::Q5_0::kBytes},
    {GgmlType::Q5_1, "Q5_1", ggml::Q5_1::kElems, ggml::Q5_1::kBytes},
    {GgmlType::Q8_0, "Q8_0", ggml::Q8_0::kElems, ggml::Q8_0::kBytes},
    {GgmlType::Q8_1, "Q8_1", 32, 36},
    {GgmlType::Q2_K, "Q2_K", 256, 84},
    {GgmlType::Q3_K, "Q3_K", 256, 110},
    {GgmlType::Q4_K, "Q4_K", ggml::Q4_K::kElems, ggml::Q4_K::kBytes},
    {GgmlType::Q5_K, "Q5_K", 256, 176},
    {GgmlType::Q6_K, "Q6_K", ggml::Q6_K::kElems, ggml::Q6_K::kBytes},
    {GgmlType::Q8_K, "Q8_K", 256, 292},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66},
    {GgmlType::IQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98},
    {GgmlType::IQ1_S, "IQ1_S", 256, 50},
    {GgmlType::IQ4_NL, "IQ4_NL", ggml::IQ4_NL::kElems, ggml::IQ4_NL::kBytes},
    {GgmlType::IQ3_S, "IQ3_S", 256, 110},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82},
    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::I8, "I8", 1, 1},
    {GgmlType::I16, "I16", 1, 2},
    {GgmlType::I32, "I32", 1, 4},
    {GgmlType::I64, "I64", 1, 8},
    {GgmlType::F64, "F64", 1, 8},
    {GgmlType::IQ1_M, "IQ1_M", 256, 56},
    {GgmlType::BF16, "BF16", 1, 2},
    {GgmlType::TQ1_0, "TQ1_0", 256, 54},
    {GgmlType::TQ2_0, "TQ2_0", 256, 66},
    {GgmlType::MXFP4, "MXFP4", ggml::MXFP4::kElems, ggml::MXFP4::kBytes},
};

constexpr uint32_t kMaxDims = 4;
// Real files nest arrays at most once or twice; the bound keeps hostile nesting off the stack.
constexpr int kMaxArrayDepth = 8;
constexpr uint32_t kDefaultAlignment = 32;
// Each nested array costs ~150 bytes of index for 12 bytes of file; the cap keeps a hostile
// file of nested empty arrays from turning into gigabytes of heap. Real files have a handful.
constexpr uint64_t kMaxNestedArrays = uint64_t{1} << 20;

// Smallest encoding of one element of each type, used to bound counts by the bytes left.
constexpr uint64_t kStringMinBytes = 8;               // u64 length, empty body
constexpr uint64_t kArrayMinBytes = 4 + 8;            // element type, count
constexpr uint64_t kKvMinBytes = 8 + 1 + 4 + 1;       // key length, 1-byte key, type, 1-byte value
constexpr uint64_t kTensorInfoMinBytes = 8 + 1 + 4 + 4 + 8;  // name length, name, n_dims, type, offset

// Fixed encoded size of a scalar type; 0 for string and array.
uint64_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::boolean: return 1;
    case GgufValueType::u16: case GgufValueType::i16: return 2;
    case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::f32: return 4;
    case GgufValueType::u64: case GgufValueType::i64: case GgufValueType::f64: return 8;
    case GgufValueType::string: case GgufValueType::array: return 0;
  }
  return 0;
}

uint64_t min_encoded_size(GgufValueType t) {
  if (t == GgufValueType::string) return kStringMinBytes;
  if (t == GgufValueType::array) return kArrayMinBytes;
  return scalar_size(t);
}

bool is_signed(GgufValueType t) {
  return t == GgufValueType::i8 || t == GgufValueType::i16 || t == GgufValueType::i32 || t == GgufValueType::i64;
}
bool is_unsigned(GgufValueType t) {
  return t == GgufValueType::u8 || t == GgufValueType::u16 || t == GgufValueType::u32 || t == GgufValueType::u64;
}

// Decodes one little-endian scalar into the widest type of its family.
void decode_scalar(GgufValueType t, const uint8_t* p, uint64_t* u, int64_t* i, double* f) {
  switch (t) {
    case GgufValueType::u8: case GgufValueType::boolean: *u = p[0]; return;
    case GgufValueType::i8: *i = static_cast<int8_t>(p[0]); return;
    case GgufValueType::u16: { uint16_t v; std::memcpy(&v, p, 2); *u = v; return; }
    case GgufValueType::i16: { int16_t v; std::memcpy(&v, p, 2); *i = v; return; }
    case GgufValueType::u32: { uint32_t v; std::memcpy(&v, p, 4); *u = v; return; }
    case GgufValueType::i32: { int32_t v; std::memcpy(&v, p, 4); *i = v; return; }
    case GgufValueType::u64: { uint64_t v; std::memcpy(&v, p, 8); *u = v; return; }
    case GgufValueType::i64: { int64_t v; std::memcpy(&v, p, 8); *i = v; return; }
    case GgufValueType::f32: { float v; std::memcpy(&v, p, 4); *f = v; return; }
    case GgufValueType::f64: { double v; std::memcpy(&v, p, 8); *f = v; return; }
    case GgufValueType::string: case GgufValueType::array: return;
  }
}

// Keys and names come from the file; escape them so an error stays one printable line.
std::string printable(std::string_view s) {
  constexpr size_t kMaxShown = 80;
  std::string out;
  for (size_t k = 0; k < s.size() && k < kMaxShown; ++k) {
    unsigned char c = static_cast<unsigned char>(s[k]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (s.size() > kMaxShown) out += "...";
  return out;
}

std::string num(uint64_t v) { return std::to_string(v); }

}  // namespace

const char* value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::u8: return "u8";
    case GgufValueType::i8: return "i8";
    case GgufValueType::u16: return "u16";
    case GgufValueType::i16: return "i16";
    case GgufValueType::u32: return "u32";
    case GgufValueType::i32: return "i32";
    case GgufValueType::f32: return "f32";
    case GgufValueType::boolean: return "bool";
    case GgufValueType::string: return "string";
    case GgufValueType::array: return "array";
    case GgufValueType::u64: return "u64";
    case GgufValueType::i64: return "i64";
    case GgufValueType::f64: return "f64";
  }
  return "unknown";
}

std::span<const GgmlTypeTraits> ggml_type_table() { return kGgmlTypes; }

const GgmlTypeTraits* find_ggml_type(uint32_t type_number) {
  for (const auto& t : kGgmlTypes)
    if (static_cast<uint32_t>(t.type) == type_number) return &t;
  return nullptr;
}

const char* ggml_type_name(GgmlType type) {
  const GgmlTypeTraits* t = find_ggml_type(static_cast<uint32_t>(type));
  return t ? t->name : "unknown";
}

// ---- GgufValue -------------------------------------------------------------------------------

bool GgufValue::is_integer() const { return is_signed(type_) || is_unsigned(type_); }

std::optional<uint64_t> GgufValue::as_uint() const {
  if (is_unsigned(type_)) return scalar_.u;
  if (is_signed(type_) && scalar_.i >= 0) return static_cast<uint64_t>(scalar_.i);
  return std::nullopt;
}

std::optional<int64_t> GgufValue::as_int() const {
  if (is_signed(type_)) return scalar_.i;
  if (is_unsigned(type_) && scalar_.u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(scalar_.u);
  return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
  if (is_float()) return scalar_.f;
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (type_ == GgufValueType::boolean) return scalar_.u != 0;
  return std::nullopt;
}

std::optional<std::string_view> GgufValue::as_string() const {
  if (type_ == GgufValueType::string) return string_;
  return std::nullopt;
}

std::optional<uint64_t> GgufValue::array_uint(const GgufArray& a, uint64_t i) {
  const uint64_t size = scalar_size(a.element_type);
  if (size == 0 || i >= a.count || a.element_type == GgufValueType::f32 || a.element_type == GgufValueType::f64)
    return std::nullopt;
  uint64_t u = 0;
  int64_t s = 0;
  double f = 0;
  decode_scalar(a.element_type, a.raw + i * size, &u, &s, &f);
  if (is_signed(a.element_type)) {
    if (s < 0) return std::nullopt;
    return static_cast<uint64_t>(s);
  }
  return u;
}

std::optional<double> GgufValue::array_float(const GgufArray& a, uint64_t i) {
  const uint64_t size = scalar_size(a.element_type);
  if (size == 0 || i >= a.count || a.element_type == GgufValueType::boolean) return std::nullopt;
  uint64_t u = 0;
  int64_t s = 0;
  double f = 0;
  decode_scalar(a.element_type, a.raw + i * size, &u, &s, &f);
  if (is_signed(a.element_type)) return static_cast<double>(s);
  if (is_unsigned(a.element_type)) return static_cast<double>(u);
  return f;
}

// ---- parser ----------------------------------------------------------------------------------

class GgufParser {
 public:
  explicit GgufParser(GgufFile& file) : f_(file), p_(file.bytes_.data()), size_(file.bytes_.size()) {}

  void run() {
    read_header();
    read_metadata();
    read_tensor_infos();
    place_tensors();
  }

 private:
  struct TensorInfoAt {
    size_t index;
    uint64_t info_offset;  // where the tensor's info record starts, for error messages
  };

  [[noreturn]] void fail(uint64_t at, const std::string& problem) { throw_input_error_at(f_.name_, at, problem); }

  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const char* what) {
    if (n > remaining())
      fail(pos_, std::string("truncated: ") + what + " needs " + num(n) + " bytes, " + num(remaining()) +
                     " left in the file");
  }

  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string_view read_string(const char* what) {
    const uint64_t at = pos_;
    const uint64_t len = read<uint64_t>(what);
    if (len > remaining())
      fail(at, std::string(what) + " length " + num(len) + " exceeds the " + num(remaining()) +
                   " bytes left in the file");
    std::string_view s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

  GgufValueType read_value_type(const char* what) {
    const uint64_t at = pos_;
    const uint32_t raw = read<uint32_t>(what);
    if (raw > static_cast<uint32_t>(GgufValueType::f64)) fail(at, std::string("unknown ") + what + " " + num(raw));
    return static_cast<GgufValueType>(raw);
  }

  GgufValue read_value(GgufValueType type, int depth) {
    GgufValue v;
    v.type_ = type;
    v.offset_ = pos_;
    if (type == GgufValueType::string) {
      v.string_ = read_string("string value");
    } else if (type == GgufValueType::array) {
      v.array_ = std::make_shared<const GgufArray>(read_array(depth));
    } else {
      const uint64_t size = scalar_size(type);
      need(size, value_type_name(type));
      if (type == GgufValueType::boolean && p_[pos_] > 1)
        fail(pos_, "bool value " + num(p_[pos_]) + " is neither 0 nor 1");
      decode_scalar(type, p_ + pos_, &v.scalar_.u, &v.scalar_.i, &v.scalar_.f);
      pos_ += size;
    }
    return v;
  }

  GgufArray read_array(int depth) {
    const uint64_t at = pos_;
    if (depth >= kMaxArrayDepth) fail(at, "arrays nested deeper than " + num(kMaxArrayDepth) + " levels");
    GgufArray a;
    a.element_type = read_value_type("array element type");
    const uint64_t count_at = pos_;
    a.count = read<uint64_t>("array length");
    const uint64_t min_size = min_encoded_size(a.element_type);
    if (a.count > remaining() / min_size)
      fail(count_at, "array of " + num(a.count) + " " + value_type_name(a.element_type) + " elements cannot fit in the " +
                         num(remaining()) + " bytes left in the file");
    if (a.element_type == GgufValueType::string) {
      a.strings.reserve(a.count);
      for (uint64_t k = 0; k < a.count; ++k) a.strings.push_back(read_string("array string"));
    } else if (a.element_type == GgufValueType::array) {
      nested_arrays_ += a.count;
      if (nested_arrays_ > kMaxNestedArrays)
        fail(count_at, "more than " + num(kMaxNestedArrays) + " nested arrays in the file");
      a.arrays.reserve(a.count);
      for (uint64_t k = 0; k < a.count; ++k) a.arrays.push_back(read_value(GgufValueType::array, depth + 1));
    } else {
      a.raw = p_ + pos_;
      if (a.element_type == GgufValueType::boolean) {
        for (uint64_t k = 0; k < a.count; ++k)
          if (a.raw[k] > 1) fail(pos_ + k, "bool array element " + num(a.raw[k]) + " is neither 0 nor 1");
      }
      pos_ += a.count * min_size;  // cannot overflow: bounded by remaining() above
    }
    return a;
  }

  void read_header() {
    if (size_ < 4) fail(0, "truncated: " + num(size_) + " bytes is shorter than the GGUF magic");
    if (std::memcmp(p_, "GGUF", 4) != 0) {
      std::string seen;
      for (int k = 0; k < 4; ++k) seen += printable(std::string_view(reinterpret_cast<const char*>(p_ + k), 1));
      fail(0, "not a GGUF file: magic is '" + seen + "', expected 'GGUF'");
    }
    pos_ = 4;
    const uint32_t version = read<uint32_t>("GGUF version");
    const uint32_t swapped = __builtin_bswap32(version);
    if (version != 2 && version != 3) {
      if (swapped == 2 || swapped == 3) fail(4, "big-endian GGUF files are not supported");
      fail(4, "unsupported GGUF version " + num(version) + " (kvgate reads versions 2 and 3)");
    }
    f_.version_ = version;
    tensor_count_at_ = pos_;
    tensor_count_ = read<uint64_t>("tensor count");
    const uint64_t kv_count_at = pos_;
    kv_count_ = read<uint64_t>("metadata count");
    if (kv_count_ > remaining() / kKvMinBytes)
      fail(kv_count_at, "metadata count " + num(kv_count_) + " cannot fit in the " + num(remaining()) +
                            " bytes left in the file");
    check_tensor_count();
  }

  void check_tensor_count() {
    if (tensor_count_ > remaining() / kTensorInfoMinBytes)
      fail(tensor_count_at_, "tensor count " + num(tensor_count_) + " cannot fit in the " + num(remaining()) +
                                 " bytes left in the file");
  }

  void read_metadata() {
    f_.metadata_.reserve(kv_count_);
    for (uint64_t k = 0; k < kv_count_; ++k) {
      const uint64_t at = pos_;
      const std::string_view key = read_string("metadata key");
      if (key.empty()) fail(at, "empty metadata key");
      const GgufValueType type = read_value_type("metadata value type");
      GgufValue value = read_value(type, 0);
      if (!f_.metadata_index_.emplace(key, f_.metadata_.size()).second)
        fail(at, "duplicate metadata key '" + printable(key) + "'");
      f_.metadata_.emplace_back(key, std::move(value));
    }
    if (const GgufValue* a = f_.find("general.alignment")) {
      const std::optional<uint64_t> v = a->as_uint();
      if (!v || *v == 0 || *v > (1u << 30) || !std::has_single_bit(*v))
        fail(a->file_offset(), "general.alignment must be a power of two integer, not " + describe(*a));
      f_.alignment_ = static_cast<uint32_t>(*v);
    } else {
      f_.alignment_ = kDefaultAlignment;
    }
  }

  std::string describe(const GgufValue& v) {
    if (auto u = v.as_uint()) return value_type_name(v.type()) + std::string(" ") + num(*u);
    if (auto i = v.as_int()) return value_type_name(v.type()) + std::string(" ") + std::to_string(*i);
    return std::string("a ") + value_type_name(v.type());
  }

  void read_tensor_infos() {
    check_tensor_count();  // the bound is tighter now that the metadata is consumed
    f_.tensors_.reserve(tensor_count_);
    infos_.reserve(tensor_count_);
    for (uint64_t k = 0; k < tensor_count_; ++k) {
      const uint64_t at = pos_;
      GgufTensor t;
      t.name = read_string("tensor name");
      if (t.name.empty()) fail(at, "empty tensor name");
      const uint64_t dims_at = pos_;
      t.n_dims = read<uint32_t>("tensor dimension count");
      if (t.n_dims > kMaxDims)
        fail(dims_at, "tensor '" + printable(t.name) + "' has " + num(t.n_dims) + " dimensions (at most 4)");
      uint64_t elements = 1;
      for (uint32_t d = 0; d < t.n_dims; ++d) {
        const uint64_t dim_at = pos_;
        t.dims[d] = read<uint64_t>("tensor dimension");
        if (__builtin_mul_overflow(elements, t.dims[d], &elements) ||
            elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          fail(dim_at, "tensor '" + printable(t.name) + "' element count overflows 63 bits");
      }
      t.n_elements = elements;
      const uint64_t type_at = pos_;
      const uint32_t type_number = read<uint32_t>("tensor type");
      const GgmlTypeTraits* traits = find_ggml_type(type_number);
      if (!traits) fail(type_at, "tensor '" + printable(t.name) + "' has unknown ggml type " + num(type_number));
      t.type = traits->type;
      if (t.dims[0] % traits->block_size != 0)
        fail(dims_at, "tensor '" + printable(t.name) + "' row length " + num(t.dims[0]) + " is not a multiple of " +
                          traits->name + "'s block size " + num(traits->block_size));
      // Rows hold whole blocks, so elements / block_size counts the blocks exactly.
      if (__builtin_mul_overflow(t.n_elements / traits->block_size, uint64_t{traits->block_bytes}, &t.n_bytes))
        fail(dims_at, "tensor '" + printable(t.name) + "' byte size overflows 64 bits");
      const uint64_t offset_at = pos_;
      t.data_offset = read<uint64_t>("tensor data offset");
      if (t.data_offset % f_.alignment_ != 0)
        fail(offset_at, "tensor '" + printable(t.name) + "' data offset " + num(t.data_offset) +
                            " is not a multiple of the alignment " + num(f_.alignment_));
      if (!f_.tensor_index_.emplace(t.name, f_.tensors_.size()).second)
        fail(at, "duplicate tensor name '" + printable(t.name) + "'");
      infos_.push_back({f_.tensors_.size(), at});
      f_.tensors_.push_back(t);
    }
  }

  void place_tensors() {
    const uint64_t padding = (f_.alignment_ - pos_ % f_.alignment_) % f_.alignment_;
    f_.data_offset_ = pos_ + padding;  // pos_ <= size_, so no overflow
    for (const TensorInfoAt& info : infos_) {
      GgufTensor& t = f_.tensors_[info.index];
      uint64_t end = 0;
      if (__builtin_add_overflow(f_.data_offset_, t.data_offset, &t.file_offset) ||
          __builtin_add_overflow(t.file_offset, t.n_bytes, &end) || end > size_)
        fail(info.info_offset, "tensor '" + printable(t.name) + "' data (" + num(t.n_bytes) + " bytes at data offset " +
                                   num(t.data_offset) + ") extends past the end of the " + num(size_) + "-byte file");
      t.data = p_ + t.file_offset;
    }
    std::vector<TensorInfoAt> by_offset = infos_;
    std::sort(by_offset.begin(), by_offset.end(), [&](const TensorInfoAt& a, const TensorInfoAt& b) {
      return f_.tensors_[a.index].data_offset < f_.tensors_[b.index].data_offset;
    });
    for (size_t k = 1; k < by_offset.size(); ++k) {
      const GgufTensor& prev = f_.tensors_[by_offset[k - 1].index];
      const GgufTensor& cur = f_.tensors_[by_offset[k].index];
      if (prev.data_offset + prev.n_bytes > cur.data_offset)
        fail(by_offset[k].info_offset, "tensor '" + printable(cur.name) + "' data overlaps tensor '" +
                                           printable(prev.name) + "'");
    }
  }

  GgufFile& f_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t tensor_count_at_ = 0;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
  uint64_t nested_arrays_ = 0;
  std::vector<TensorInfoAt> infos_;
};

// ---- GgufFile --------------------------------------------------------------------------------

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f;
  f.mapping_ = std::make_unique<MappedFile>(path);
  f.bytes_ = std::span<const uint8_t>(f.mapping_->data(), f.mapping_->size());
  f.name_ = path;
  GgufParser(f).run();
  return f;
}

GgufFile GgufFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
  GgufFile f;
  f.bytes_ = bytes;
  f.name_ = name;
  GgufParser(f).run();
  return f;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::fail_key(std::string_view key, const GgufValue& v, const char* wanted) const {
  throw_input_error_at(name_, v.file_offset(),
                       "metadata key '" + printable(key) + "' is " + value_type_name(v.type()) +
                           (v.is_integer() ? " " + (v.as_int() ? std::to_string(*v.as_int()) : num(*v.as_uint())) : "") +
                           ", expected " + wanted);
}

std::optional<uint32_t> GgufFile::get_u32(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  const auto u = v->as_uint();
  if (!u || *u > std::numeric_limits<uint32_t>::max()) fail_key(key, *v, "an unsigned 32-bit integer");
  return static_cast<uint32_t>(*u);
}

std::optional<uint64_t> GgufFile::get_u64(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  const auto u = v->as_uint();
  if (!u) fail_key(key, *v, "an unsigned integer");
  return *u;
}

std::optional<int64_t> GgufFile::get_i64(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  const auto i = v->as_int();
  if (!i) fail_key(key, *v, "a signed 64-bit integer");
  return *i;
}

std::optional<double> GgufFile::get_f64(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto f = v->as_float()) return *f;
  if (auto i = v->as_int()) return static_cast<double>(*i);
  if (auto u = v->as_uint()) return static_cast<double>(*u);
  fail_key(key, *v, "a number");
}

std::optional<float> GgufFile::get_f32(std::string_view key) const {
  auto d = get_f64(key);
  if (!d) return std::nullopt;
  return static_cast<float>(*d);
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto b = v->as_bool()) return *b;
  fail_key(key, *v, "a bool");
}

std::optional<std::string_view> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto s = v->as_string()) return *s;
  fail_key(key, *v, "a string");
}

const GgufArray* GgufFile::get_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (const GgufArray* a = v->as_array()) return a;
  fail_key(key, *v, "an array");
}

// ---- model architecture ----------------------------------------------------------------------

namespace {

// Architectures whose RoPE rotates the two halves of a head (llama.cpp: LLAMA_ROPE_TYPE_NEOX).
bool rotates_halves(std::string_view arch) {
  for (std::string_view a : {"qwen", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "gemma", "gemma2", "gemma3", "phi2",
                             "phi3", "stablelm", "falcon", "gptneox", "olmo2", "starcoder2", "dbrx"})
    if (arch == a) return true;
  return false;
}

// Default local/global layer pattern of the architectures with sliding-window attention:
// layer l is local unless l % pattern == pattern - 1 (llama_hparams::set_swa_pattern).
uint32_t default_swa_pattern(std::string_view arch) {
  if (arch == "gemma2") return 2;
  if (arch == "gemma3") return 6;
  return 0;
}

// Every hyper-parameter the file states is range-checked where it is read, so a damaged or
// hand-edited header is an input error at the key's offset, not a model that runs on a NaN
// epsilon (all-zero logits) or a count that wraps when printed or multiplied. The bounds are far
// above any real model's and keep products of them inside 64 bits.
void check_ranges(const GgufFile& file, const ModelArch& m) {
  const std::string p = m.arch + ".";
  auto fail = [&](const std::string& key, const std::string& problem) {
    const GgufValue* v = file.find(key);
    throw_input_error_at(file.name(), v ? v->file_offset() : 0, "metadata key '" + printable(key) + "' " + problem);
  };
  const std::pair<const char*, uint64_t> counts[] = {
      {"block_count", 4096},         {"embedding_length", 1u << 20},     {"attention.head_count", 1u << 16},
      {"attention.head_count_kv", 1u << 16}, {"attention.key_length", 1u << 16}, {"attention.value_length", 1u << 16},
      {"feed_forward_length", 1u << 24}, {"context_length", 1u << 30},   {"rope.dimension_count", 1u << 16}};
  for (const auto& [name, most] : counts) {
    const std::string key = p + name;
    if (!file.find(key)) continue;
    const auto v = file.get_u32(key);
    if (!v) continue;  // a value of another type is reported where it is required
    if (*v == 0) fail(key, "is 0");
    if (*v > most) fail(key, "is " + num(*v) + ", more than kvgate accepts (" + num(most) + ")");
  }
  const std::pair<const char*, float> reals[] = {{"attention.layer_norm_rms_epsilon", m.rms_eps},
                                                 {"rope.freq_base", m.rope_base}};
  for (const auto& [name, value] : reals) {
    const std::string key = p + name;
    if (file.find(key) && !(std::isfinite(value) && value > 0.0f))
      fail(key, "is " + std::to_string(value) + "; it must be a finite number greater than 0");
  }
  if (m.rms_eps >= 1.0f) fail(p + "attention.layer_norm_rms_epsilon", "is " + std::to_string(m.rms_eps) + "; it must be below 1");
  for (const char* name : {"rope.scaling.factor", "rope.scale_linear", "rope.freq_base_swa"}) {
    const std::string key = p + name;
    if (const auto v = file.get_f32(key); v && !(std::isfinite(*v) && *v >= 0.0f))
      fail(key, "is " + std::to_string(*v) + "; it must be a finite number, not negative");
  }
}

void read_rope_and_window(const GgufFile& file, ModelArch& m) {
  const std::string p = m.arch + ".";
  m.rope_layout = rotates_halves(m.arch) ? RopeLayout::halves : RopeLayout::adjacent_pairs;
  // As llama.cpp: the type defaults to "linear", whose factor defaults to none (scale 1).
  m.rope_scaling = std::string(file.get_string(p + "rope.scaling.type").value_or("linear"));
  auto factor = file.get_f32(p + "rope.scaling.factor");
  if (!factor) factor = file.get_f32(p + "rope.scale_linear");
  m.rope_freq_scale = (!factor || *factor == 0.0f || m.rope_scaling == "none") ? 1.0f : 1.0f / *factor;
  if (m.rope_scaling == "linear" && m.rope_freq_scale == 1.0f) m.rope_scaling = "none";

  const uint32_t pattern = default_swa_pattern(m.arch);
  if (pattern == 0) return;  // llama.cpp ignores a sliding_window key on other architectures
  // Gemma 2 has a window of 4096 even when the file does not say so; Gemma 3 without the key
  // is a global-attention model.
  m.sliding_window = file.get_u32(p + "attention.sliding_window").value_or(m.arch == "gemma2" ? 4096u : 0u);
  if (m.sliding_window == 0) return;
  m.rope_base_swa = file.get_f32(p + "rope.freq_base_swa").value_or(m.arch == "gemma2" ? m.rope_base : 10000.0f);
  m.layer_swa.assign(m.n_layers, false);
  const std::string pattern_key = p + "attention.sliding_window_pattern";
  if (const GgufValue* v = file.find(pattern_key); v && v->as_array()) {
    const GgufArray& a = *v->as_array();
    if (a.count != m.n_layers)
      throw_input_error_at(file.name(), v->file_offset(), "metadata key '" + pattern_key + "' has " + num(a.count) +
                                                              " entries for " + num(m.n_layers) + " layers");
    for (uint64_t l = 0; l < a.count; ++l) {
      const auto flag = GgufValue::array_uint(a, l);
      if (!flag) throw_input_error_at(file.name(), v->file_offset(), "metadata key '" + pattern_key + "' is not an array of bools");
      m.layer_swa[l] = *flag != 0;
    }
    return;
  }
  const uint32_t n = file.get_u32(pattern_key).value_or(pattern);
  for (uint32_t l = 0; l < m.n_layers; ++l) m.layer_swa[l] = n == 0 || l % n < n - 1;
}

}  // namespace

ModelArch read_model_arch(const GgufFile& file) {
  ModelArch m;
  const auto arch = file.get_string("general.architecture");
  if (!arch) throw_input_error(file.name() + ": missing metadata key 'general.architecture'");
  m.arch = std::string(*arch);
  m.name = std::string(file.get_string("general.name").value_or(""));
  const std::string p = m.arch + ".";

  auto required = [&](const std::string& key) -> uint32_t {
    const auto v = file.get_u32(key);
    if (!v) throw_input_error(file.name() + ": missing metadata key '" + printable(key) + "'");
    if (*v == 0) throw_input_error_at(file.name(), file.find(key)->file_offset(), "metadata key '" + printable(key) + "' is 0");
    return *v;
  };
  m.n_layers = required(p + "block_count");
  m.n_embd = required(p + "embedding_length");
  m.n_heads = required(p + "attention.head_count");
  m.n_kv_heads = file.get_u32(p + "attention.head_count_kv").value_or(m.n_heads);
  if (m.n_kv_heads == 0 || m.n_heads % m.n_kv_heads != 0)
    throw_input_error(file.name() + ": " + num(m.n_heads) + " attention heads are not a multiple of " +
                      num(m.n_kv_heads) + " KV heads");
  if (auto k = file.get_u32(p + "attention.key_length")) {
    m.head_dim = *k;
  } else {
    if (m.n_embd % m.n_heads != 0)
      throw_input_error(file.name() + ": embedding length " + num(m.n_embd) + " is not a multiple of " +
                        num(m.n_heads) + " heads and attention.key_length is absent");
    m.head_dim = m.n_embd / m.n_heads;
  }
  m.head_dim_v = file.get_u32(p + "attention.value_length").value_or(m.head_dim);
  m.n_ff = file.get_u32(p + "feed_forward_length").value_or(0);
  m.n_ctx_train = file.get_u32(p + "context_length").value_or(0);
  m.n_rot = file.get_u32(p + "rope.dimension_count").value_or(m.head_dim);
  m.rope_base = file.get_f32(p + "rope.freq_base").value_or(10000.0f);
  m.rms_eps = file.get_f32(p + "attention.layer_norm_rms_epsilon").value_or(1e-5f);
  check_ranges(file, m);
  read_rope_and_window(file, m);
  if (const GgufArray* tokens = file.get_array("tokenizer.ggml.tokens")) {
    if (tokens->count > std::numeric_limits<uint32_t>::max())
      throw_input_error(file.name() + ": vocabulary of " + num(tokens->count) + " tokens is too large");
    m.n_vocab = static_cast<uint32_t>(tokens->count);
  } else {
    m.n_vocab = file.get_u32(p + "vocab_size").value_or(0);
  }
  return m;
}

}  // namespace kvgate::runtime
