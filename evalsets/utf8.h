#pragma once
// UTF-8 checks shared by the loader and the importers (core has no Unicode support, and this
// layer may not use runtime's).
#include <cstddef>
#include <string_view>

namespace kvgate::evalsets {

// Offset of the first byte that is not part of a well-formed UTF-8 sequence (overlongs,
// surrogates and code points above U+10FFFF are ill-formed), or npos when the text is valid.
size_t find_invalid_utf8(std::string_view text);

// True when `offset` does not fall inside a multi-byte sequence (offset == size counts).
inline bool on_code_point_boundary(std::string_view text, size_t offset) {
  if (offset > text.size()) return false;
  if (offset == text.size()) return true;
  return (static_cast<unsigned char>(text[offset]) & 0xC0) != 0x80;
}

// Number of code points in valid UTF-8.
size_t count_code_points(std::string_view text);

}  // namespace kvgate::evalsets
