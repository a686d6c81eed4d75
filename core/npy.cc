#include "core/npy.h"

#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "core/float_convert.h"
#include "core/mapped_file.h"

namespace kvgate {

int64_t NpyArray::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// A tiny parser for the Python dict literal numpy writes as the header, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, size_t file_offset, const std::string& name)
      : text_(text), base_(file_offset), name_(name) {}

  struct Fields {
    std::optional<std::string> descr;
    std::optional<bool> fortran_order;
    std::optional<std::vector<int64_t>> shape;
  };

  Fields parse() {
    Fields f;
    skip_space();
    expect('{');
    for (;;) {
      skip_space();
      if (peek() == '}') {
        ++pos_;
        break;
      }
      const size_t key_pos = pos_;
      const std::string key = parse_string();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        f.descr = parse_string();
      } else if (key == "fortran_order") {
        f.fortran_order = parse_bool();
      } else if (key == "shape") {
        f.shape = parse_shape();
      } else {
        fail(key_pos, "unexpected header key '" + key + "'");
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip_space();
      expect('}');
      break;
    }
    skip_space();
    if (pos_ != text_.size()) fail(pos_, "unexpected text after the header dictionary");
    return f;
  }

  [[noreturn]] void fail(size_t at, const std::string& problem) const {
    throw_input_error_at(name_, base_ + at, "malformed .npy header: " + problem);
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t')) ++pos_;
  }
  void expect(char c) {
    if (peek() != c) fail(pos_, std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string parse_string() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(pos_, "expected a quoted string");
    const size_t start = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) ++pos_;
    if (pos_ >= text_.size()) fail(start, "unterminated string");
    std::string s(text_.substr(start, pos_ - start));
    ++pos_;
    return s;
  }
  bool parse_bool() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail(pos_, "expected True or False");
  }
  std::vector<int64_t> parse_shape() {
    expect('(');
    std::vector<int64_t> shape;
    for (;;) {
      skip_space();
      if (peek() == ')') {
        ++pos_;
        return shape;
      }
      const size_t num_pos = pos_;
      if (peek() < '0' || peek() > '9') fail(pos_, "expected a non-negative integer dimension");
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) fail(num_pos, "dimension is too large");
        v = v * 10 + (peek() - '0');
        ++pos_;
      }
      // numpy writes long integers as e.g. "3L" under Python 2.
      if (peek() == 'L') ++pos_;
      shape.push_back(v);
      if (shape.size() > 32) fail(num_pos, "more than 32 dimensions");
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip_space();
      expect(')');
      return shape;
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
  size_t base_;
  const std::string& name_;
};

uint32_t read_le(const uint8_t* p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& name) {
  if (size < kMagicLen + 2 || std::memcmp(bytes, kMagic, kMagicLen) != 0)
    throw_input_error_at(name, 0, "not a .npy file (missing \\x93NUMPY magic)");
  const int major = bytes[6];
  if (major < 1 || major > 3)
    throw_input_error_at(name, 6, "unsupported .npy format version " + std::to_string(major));
  const int len_bytes = major == 1 ? 2 : 4;
  const size_t header_start = 8 + static_cast<size_t>(len_bytes);
  if (size < header_start) throw_input_error_at(name, 8, "file ends inside the header length");
  const size_t header_len = read_le(bytes + 8, len_bytes);
  if (header_len > size - header_start)
    throw_input_error_at(name, 8, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                                      std::to_string(size) + " bytes)");
  const std::string_view header(reinterpret_cast<const char*>(bytes + header_start), header_len);
  HeaderParser parser(header, header_start, name);
  const HeaderParser::Fields fields = parser.parse();
  if (!fields.descr) parser.fail(0, "missing 'descr'");
  if (!fields.shape) parser.fail(0, "missing 'shape'");
  if (fields.fortran_order.value_or(false))
    throw_input_error_at(name, header_start, "Fortran-order arrays are not supported; save with C order");

  NpyArray out;
  const std::string& descr = *fields.descr;
  size_t item = 0;
  if (descr == "<f4") {
    out.dtype = NpyDtype::f32;
    item = 4;
  } else if (descr == "<f2") {
    out.dtype = NpyDtype::f16;
    item = 2;
  } else {
    throw_input_error_at(name, header_start,
                         "unsupported dtype '" + descr + "' (expected little-endian float16 '<f2' or float32 '<f4')");
  }
  out.shape = *fields.shape;
  const size_t data_start = header_start + header_len;
  const size_t available = size - data_start;
  // Multiply with an overflow check against the bytes actually present, so a header claiming a
  // huge shape is rejected before anything is allocated.
  size_t count = 1;
  for (int64_t d : out.shape) {
    if (d != 0 && count > available / item / static_cast<size_t>(d)) {
      count = std::numeric_limits<size_t>::max();
      break;
    }
    count *= static_cast<size_t>(d);
  }
  if (count == std::numeric_limits<size_t>::max() || count * item > available)
    throw_input_error_at(name, data_start, "data is truncated: the shape needs more bytes than the " +
                                               std::to_string(available) + " after the header");
  if (count * item != available)
    throw_input_error_at(name, data_start + count * item,
                         std::to_string(available - count * item) + " unexpected trailing bytes after the array data");
  out.data.resize(count);
  const uint8_t* src = bytes + data_start;
  if (out.dtype == NpyDtype::f32) {
    std::memcpy(out.data.data(), src, count * 4);
  } else {
    for (size_t i = 0; i < count; ++i) out.data[i] = f16_to_f32(static_cast<uint16_t>(read_le(src + 2 * i, 2)));
  }
  return out;
}

NpyArray read_npy(const std::string& path) {
  MappedFile file(path);
  return parse_npy(file.data(), file.size(), path);
}

std::vector<uint8_t> encode_npy(const std::vector<int64_t>& shape, const float* data, NpyDtype dtype) {
  std::string dict = std::string("{'descr': '") + (dtype == NpyDtype::f32 ? "<f4" : "<f2") +
                     "', 'fortran_order': False, 'shape': (";
  size_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) throw_internal_error("encode_npy: negative dimension");
    dict += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) dict += ",";
    if (i + 1 < shape.size()) dict += " ";
    count *= static_cast<size_t>(shape[i]);
  }
  dict += "), }";
  // numpy pads the header with spaces and a final newline so the data starts 64-byte aligned.
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  if (dict.size() > 0xffff) throw_internal_error("encode_npy: header too long for format 1.0");
  std::vector<uint8_t> out(kMagic, kMagic + kMagicLen);
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<uint8_t>(dict.size() & 0xff));
  out.push_back(static_cast<uint8_t>(dict.size() >> 8));
  out.insert(out.end(), dict.begin(), dict.end());
  const size_t item = dtype == NpyDtype::f32 ? 4 : 2;
  const size_t data_start = out.size();
  out.resize(data_start + count * item);
  if (dtype == NpyDtype::f32) {
    if (count) std::memcpy(out.data() + data_start, data, count * 4);
  } else {
    for (size_t i = 0; i < count; ++i) {
      const uint16_t h = f32_to_f16(data[i]);
      out[data_start + 2 * i] = static_cast<uint8_t>(h & 0xff);
      out[data_start + 2 * i + 1] = static_cast<uint8_t>(h >> 8);
    }
  }
  return out;
}

void write_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data, NpyDtype dtype) {
  const std::vector<uint8_t> bytes = encode_npy(shape, data, dtype);
  write_output_file(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace kvgate
