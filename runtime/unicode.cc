#include "runtime/unicode.h"

#include <utf8proc.h>

#include <cstdlib>

#include <array>

#include "core/error.h"

namespace kvgate::runtime::unicode {

namespace {

// Length of the sequence a lead byte announces, 0 for bytes that cannot lead one.
size_t sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;  // continuation byte, overlong 2-byte lead (C0, C1), or beyond U+10FFFF (F5..FF)
}

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Decodes the sequence at text[pos] if it is well formed; returns its length or 0.
size_t decode_one(std::string_view text, size_t pos, uint32_t& code_point) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  const size_t len = sequence_length(b0);
  if (len == 0 || pos + len > text.size()) return 0;
  if (len == 1) {
    code_point = b0;
    return 1;
  }
  uint32_t cp = b0 & (0x7F >> len);
  for (size_t i = 1; i < len; ++i) {
    const auto b = static_cast<uint8_t>(text[pos + i]);
    if (!is_continuation(b)) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  // The lead byte ranges already exclude most overlongs; these catch the rest of them,
  // UTF-16 surrogates and code points past U+10FFFF.
  if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || (cp >= 0xD800 && cp <= 0xDFFF) ||
      cp > 0x10FFFF) {
    return 0;
  }
  code_point = cp;
  return len;
}

struct ByteMap {
  std::array<uint32_t, 256> to_code_point{};
  // Every mapped code point is below 0x144 (256 + 68 remapped bytes).
  std::array<int16_t, 0x144> to_byte{};
};

// The table from GPT-2's bytes_to_unicode(): printable Latin-1 keeps its value, the remaining
// 68 bytes take U+0100.. in byte order.
const ByteMap& byte_map() {
  static const ByteMap map = [] {
    ByteMap m;
    m.to_byte.fill(-1);
    auto keeps_value = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = keeps_value(b) ? static_cast<uint32_t>(b) : next++;
      m.to_code_point[b] = cp;
      m.to_byte[cp] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return map;
}

}  // namespace

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII runs dominate real text; skip them without the general decoder.
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    uint32_t cp = 0;
    const size_t len = decode_one(text, pos, cp);
    if (len == 0) return pos;
    pos += len;
  }
  return std::nullopt;
}

std::vector<uint32_t> decode_utf8(std::string_view text, std::vector<size_t>* byte_starts) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  if (byte_starts) {
    byte_starts->clear();
    byte_starts->reserve(text.size() + 1);
  }
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cp = 0;
    const size_t len = decode_one(text, pos, cp);
    KVGATE_CHECK(len > 0, "decode_utf8 called on text that is not well-formed UTF-8");
    if (byte_starts) byte_starts->push_back(pos);
    out.push_back(cp);
    pos += len;
  }
  if (byte_starts) byte_starts->push_back(text.size());
  return out;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    KVGATE_CHECK(cp <= 0x10FFFF, "code point beyond U+10FFFF");
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_whitespace(uint32_t cp) {
  // llama.cpp's unicode_set_whitespace, which its pre-tokenizers use for \s.
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}

bool is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
}

CharClass classify(uint32_t cp) {
  if (is_whitespace(cp)) return CharClass::whitespace;
  if (is_letter(cp)) return CharClass::letter;
  if (is_number(cp)) return CharClass::number;
  return CharClass::other;
}

uint32_t byte_to_code_point(uint8_t byte) { return byte_map().to_code_point[byte]; }

std::optional<uint8_t> code_point_to_byte(uint32_t cp) {
  const ByteMap& m = byte_map();
  if (cp >= m.to_byte.size() || m.to_byte[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(m.to_byte[cp]);
}

std::string bytes_to_vocab_form(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(byte_to_code_point(static_cast<uint8_t>(c)), out);
  return out;
}

bool vocab_form_to_bytes(std::string_view vocab_form, std::string& out) {
  bool all_mapped = true;
  size_t pos = 0;
  while (pos < vocab_form.size()) {
    uint32_t cp = 0;
    const size_t len = decode_one(vocab_form, pos, cp);
    KVGATE_CHECK(len > 0, "vocabulary string is not well-formed UTF-8");
    if (auto b = code_point_to_byte(cp)) {
      out.push_back(static_cast<char>(*b));
    } else {
      out.append(vocab_form.substr(pos, len));
      all_mapped = false;
    }
    pos += len;
  }
  return all_mapped;
}

std::string nfc(std::string_view text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    std::free(out);
    throw_internal_error(std::string("NFC normalization failed: ") + utf8proc_errmsg(n));
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace kvgate::runtime::unicode
