#include "runtime/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace kvgate::runtime {

static_assert(std::endian::native == std::endian::little, "the header length is read with memcpy");

namespace {

// The safetensors library refuses headers above 100 MB; a larger length is a damaged file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeSize {
  const char* name;
  uint32_t bytes;
};
// The dtypes of safetensors' Dtype enum with a whole number of bytes per element.
constexpr DtypeSize kDtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I16", 2}, {"U16", 2},
    {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8},
};

std::string num(uint64_t v) { return std::to_string(v); }

}  // namespace

uint32_t safetensors_dtype_bytes(std::string_view dtype) {
  for (const DtypeSize& d : kDtypes)
    if (dtype == d.name) return d.bytes;
  return 0;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.mapping_ = std::make_unique<MappedFile>(path);
  f.bytes_ = std::span<const uint8_t>(f.mapping_->data(), f.mapping_->size());
  f.name_ = path;
  f.validate();
  return f;
}

SafetensorsFile SafetensorsFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
  SafetensorsFile f;
  f.bytes_ = bytes;
  f.name_ = name;
  f.validate();
  return f;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::validate() {
  const uint64_t size = bytes_.size();
  auto fail = [&](uint64_t at, const std::string& problem) { throw_input_error_at(name_, at, problem); };
  if (size < 8) fail(0, "truncated safetensors header: " + num(size) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, bytes_.data(), 8);
  if (n > kMaxHeaderBytes) fail(0, "safetensors header length " + num(n) + " is above the format's 100 MB limit");
  if (n > size - 8)
    fail(0, "truncated safetensors header: it declares " + num(n) + " bytes of JSON, " + num(size - 8) +
                " bytes follow");
  header_bytes_ = n;
  const uint64_t data_start = 8 + n;
  const char* text = reinterpret_cast<const char*>(bytes_.data() + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + n);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts from 1 within the JSON.
    fail(8 + (e.byte > 0 ? e.byte - 1 : 0), std::string("safetensors header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(8, "safetensors header is not a JSON object");

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail(8, "safetensors header: __metadata__ is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) fail(8, "safetensors header: __metadata__ value '" + echo_user_text(mk) + "' is not a string");
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + echo_user_text(key) + "'";
    if (!value.is_object()) fail(8, where + " is not a JSON object");
    const auto dtype = value.find("dtype");
    const auto shape = value.find("shape");
    const auto offsets = value.find("data_offsets");
    if (dtype == value.end() || !dtype->is_string()) fail(8, where + " has no string 'dtype'");
    if (shape == value.end() || !shape->is_array()) fail(8, where + " has no 'shape' array");
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned())
      fail(8, where + " has no 'data_offsets' pair of unsigned integers");
    SafetensorsTensor t;
    t.name = key;
    t.dtype = dtype->get<std::string>();
    t.element_bytes = safetensors_dtype_bytes(t.dtype);
    if (t.element_bytes == 0) fail(8, where + " has dtype '" + echo_user_text(t.dtype) + "', which safetensors does not define (or is sub-byte)");
    uint64_t elements = 1;
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned()) fail(8, where + " has a shape entry that is not an unsigned integer");
      const uint64_t v = d.get<uint64_t>();
      if (__builtin_mul_overflow(elements, v, &elements) || elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(8, where + " element count overflows 63 bits");
      t.shape.push_back(v);
    }
    t.n_elements = elements;
    const uint64_t begin = (*offsets)[0].get<uint64_t>(), end = (*offsets)[1].get<uint64_t>();
    if (end < begin) fail(8, where + " data_offsets end " + num(end) + " before begin " + num(begin));
    if (__builtin_mul_overflow(elements, uint64_t{t.element_bytes}, &t.n_bytes) || t.n_bytes != end - begin)
      fail(8, where + " holds " + num(end - begin) + " bytes, its shape and dtype need " + num(elements) + " x " +
                  num(t.element_bytes));
    if (end > size - data_start)
      fail(data_start + begin, where + " data (" + num(t.n_bytes) + " bytes at data offset " + num(begin) +
                                   ") extends past the end of the " + num(size) + "-byte file (truncated?)");
    t.file_offset = data_start + begin;
    t.data = bytes_.data() + t.file_offset;
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.file_offset < b.file_offset; });
  for (size_t k = 0; k < tensors_.size(); ++k) {
    if (k > 0 && tensors_[k - 1].file_offset + tensors_[k - 1].n_bytes > tensors_[k].file_offset)
      fail(tensors_[k].file_offset, "tensor '" + echo_user_text(tensors_[k].name) + "' data overlaps tensor '" +
                                        echo_user_text(tensors_[k - 1].name) + "'");
    index_.emplace(tensors_[k].name, k);
  }
}

}  // namespace kvgate::runtime
