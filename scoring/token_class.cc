#include "scoring/token_class.h"

#include <cstdint>

namespace kvgate::scoring {

namespace {

// Decodes one code point starting at text[pos]; returns false on malformed, overlong,
// surrogate or truncated sequences.
bool decode_utf8(std::string_view text, size_t& pos, char32_t& cp) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  size_t length;
  char32_t min_value;
  if (lead < 0x80) {
    cp = lead;
    pos += 1;
    return true;
  } else if ((lead & 0xE0) == 0xC0) {
    length = 2, cp = lead & 0x1F, min_value = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, cp = lead & 0x0F, min_value = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, cp = lead & 0x07, min_value = 0x10000;
  } else {
    return false;
  }
  if (pos + length > text.size()) return false;
  for (size_t i = 1; i < length; ++i) {
    const uint8_t b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min_value || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  pos += length;
  return true;
}

bool is_hangul(char32_t cp) {
  return (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0x3130 && cp <= 0x318F) ||
         (cp >= 0xA960 && cp <= 0xA97F) || (cp >= 0xD7B0 && cp <= 0xD7FF);
}

bool is_space(char32_t cp) {
  return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f' || cp == 0xA0 ||
         cp == 0x3000;
}

bool is_code_punct(char32_t cp) {
  constexpr std::string_view kCodePunct = "()[]{}<>;:,.=+-*/%&|^!~?'\"`\\#@$_";
  return cp < 0x80 && kCodePunct.find(static_cast<char>(cp)) != std::string_view::npos;
}

}  // namespace

TokenClass classify_token(std::string_view text) {
  bool any = false, all_digits = true, all_code_punct = true, any_hangul = false;
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp;
    if (!decode_utf8(text, pos, cp)) return TokenClass::other;
    if (is_space(cp)) continue;
    any = true;
    any_hangul = any_hangul || is_hangul(cp);
    all_digits = all_digits && cp >= '0' && cp <= '9';
    all_code_punct = all_code_punct && is_code_punct(cp);
  }
  if (any_hangul) return TokenClass::hangul;
  if (!any) return TokenClass::other;
  if (all_digits) return TokenClass::digits;
  if (all_code_punct) return TokenClass::code_punct;
  return TokenClass::other;
}

std::string_view token_class_name(TokenClass c) {
  switch (c) {
    case TokenClass::digits: return "digits";
    case TokenClass::hangul: return "hangul";
    case TokenClass::code_punct: return "code_punct";
    case TokenClass::other: return "other";
  }
  return "other";
}

std::optional<TokenClass> parse_token_class(std::string_view name) {
  for (TokenClass c : kAllTokenClasses)
    if (token_class_name(c) == name) return c;
  return std::nullopt;
}

}  // namespace kvgate::scoring
