#include "runtime/gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"

namespace kvgate::runtime {
namespace {

constexpr uint32_t kAlignment = 32;  // GGUF's default; the reader needs no general.alignment key

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}
void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

uint64_t scalar_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::boolean: return 1;
    case GgufValueType::u16: case GgufValueType::i16: return 2;
    case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::f32: return 4;
    case GgufValueType::u64: case GgufValueType::i64: case GgufValueType::f64: return 8;
    case GgufValueType::string: case GgufValueType::array: return 0;
  }
  return 0;
}

// The scalar's bytes as the file stores them, rebuilt from its widened value.
void put_scalar(std::vector<uint8_t>& out, const GgufValue& v, std::string_view key) {
  const auto bad = [&] { throw_input_error("GGUF copy of '" + std::string(key) + "': unreadable scalar value"); };
  switch (v.type()) {
    case GgufValueType::u8: put<uint8_t>(out, static_cast<uint8_t>(v.as_uint().value_or(0))); return;
    case GgufValueType::u16: put<uint16_t>(out, static_cast<uint16_t>(v.as_uint().value_or(0))); return;
    case GgufValueType::u32: put<uint32_t>(out, static_cast<uint32_t>(v.as_uint().value_or(0))); return;
    case GgufValueType::u64: put<uint64_t>(out, v.as_uint().value_or(0)); return;
    case GgufValueType::i8: put<int8_t>(out, static_cast<int8_t>(v.as_int().value_or(0))); return;
    case GgufValueType::i16: put<int16_t>(out, static_cast<int16_t>(v.as_int().value_or(0))); return;
    case GgufValueType::i32: put<int32_t>(out, static_cast<int32_t>(v.as_int().value_or(0))); return;
    case GgufValueType::i64: put<int64_t>(out, v.as_int().value_or(0)); return;
    case GgufValueType::f32: put<float>(out, static_cast<float>(v.as_float().value_or(0))); return;
    case GgufValueType::f64: put<double>(out, v.as_float().value_or(0)); return;
    case GgufValueType::boolean: put<uint8_t>(out, v.as_bool().value_or(false) ? 1 : 0); return;
    case GgufValueType::string: case GgufValueType::array: break;
  }
  bad();
}

uint64_t aligned(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

std::vector<uint8_t>& GgufWriter::begin_kv(std::string_view key, GgufValueType type) {
  ++kv_count_;
  put_string(kv_, key);
  put<uint32_t>(kv_, static_cast<uint32_t>(type));
  return kv_;
}

void GgufWriter::add_u32(std::string_view key, uint32_t value) { put<uint32_t>(begin_kv(key, GgufValueType::u32), value); }
void GgufWriter::add_f32(std::string_view key, float value) { put<float>(begin_kv(key, GgufValueType::f32), value); }
void GgufWriter::add_bool(std::string_view key, bool value) {
  put<uint8_t>(begin_kv(key, GgufValueType::boolean), value ? 1 : 0);
}
void GgufWriter::add_string(std::string_view key, std::string_view value) {
  put_string(begin_kv(key, GgufValueType::string), value);
}

void GgufWriter::copy_value(std::string_view key, const GgufValue& value) {
  if (value.type() == GgufValueType::string) return add_string(key, *value.as_string());
  if (value.type() != GgufValueType::array) return put_scalar(begin_kv(key, value.type()), value, key);
  const GgufArray& a = *value.as_array();
  if (a.element_type == GgufValueType::array)
    throw_input_error("GGUF copy of '" + std::string(key) + "': nested arrays are not copied");
  std::vector<uint8_t>& out = begin_kv(key, GgufValueType::array);
  put<uint32_t>(out, static_cast<uint32_t>(a.element_type));
  put<uint64_t>(out, a.count);
  if (a.element_type == GgufValueType::string) {
    for (std::string_view s : a.strings) put_string(out, s);
  } else {
    out.insert(out.end(), a.raw, a.raw + a.count * scalar_bytes(a.element_type));
  }
}

size_t GgufWriter::add_tensor(std::string_view name, GgmlType type, std::vector<uint64_t> dims) {
  const GgmlTypeTraits* t = find_ggml_type(static_cast<uint32_t>(type));
  if (!t || dims.empty() || dims.size() > 4 || dims[0] % t->block_size != 0)
    throw_usage_error("GGUF tensor '" + std::string(name) + "': rows of " + std::to_string(dims.empty() ? 0 : dims[0]) +
                      " are not whole blocks of " + (t ? t->name : "an unknown type"));
  uint64_t rows = 1;
  for (size_t d = 1; d < dims.size(); ++d) rows *= dims[d];
  const uint64_t bytes = dims[0] / t->block_size * t->block_bytes * rows;
  tensors_.push_back({std::string(name), type, std::move(dims), bytes});
  return tensors_.size() - 1;
}

uint64_t GgufWriter::data_bytes() const {
  uint64_t n = 0;
  for (const Tensor& t : tensors_) n = aligned(n) + t.bytes;
  return n;
}

void GgufWriter::write(const std::string& path, const Fill& fill) const {
  std::vector<uint8_t> head;
  head.insert(head.end(), {'G', 'G', 'U', 'F'});
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_count_);
  head.insert(head.end(), kv_.begin(), kv_.end());
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    offset = aligned(offset);
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) put<uint64_t>(head, d);
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, offset);
    offset += t.bytes;
  }
  head.resize(aligned(head.size()), 0);

  const std::string tmp = path + ".partial";
  const auto fail = [&](const std::string& what) {
    const std::string reason = std::strerror(errno);
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw_environment_error(path + ": cannot " + what + ": " + reason);
  };
  {
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
    if (!f) fail("create " + tmp);
    if (std::fwrite(head.data(), 1, head.size(), f.get()) != head.size()) fail("write");
    constexpr size_t kChunk = size_t{1} << 22;
    std::vector<uint8_t> chunk(kChunk);
    uint64_t written = 0;  // within the data section
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const uint64_t pad = aligned(written) - written;
      std::fill_n(chunk.begin(), pad, uint8_t{0});
      if (pad && std::fwrite(chunk.data(), 1, pad, f.get()) != pad) fail("write");
      written += pad;
      // Chunks of whole blocks, so a fill never sees a block split across two calls.
      const uint64_t block = find_ggml_type(static_cast<uint32_t>(tensors_[i].type))->block_bytes;
      const uint64_t step = std::max<uint64_t>(1, kChunk / block) * block;
      for (uint64_t at = 0; at < tensors_[i].bytes; at += step) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(step, tensors_[i].bytes - at));
        fill(i, at, std::span<uint8_t>(chunk.data(), n));
        if (std::fwrite(chunk.data(), 1, n, f.get()) != n) fail("write");
      }
      written += tensors_[i].bytes;
    }
    if (std::fflush(f.get()) != 0) fail("write");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw_environment_error(path + ": cannot rename the finished file into place: " + ec.message());
  }
}

}  // namespace kvgate::runtime
