#include "scoring/sequence.h"

#include <algorithm>

namespace kvgate::scoring {

std::optional<size_t> first_divergence(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t common = std::min(a.size(), b.size());
  for (size_t i = 0; i < common; ++i)
    if (a[i] != b[i]) return i;
  if (a.size() != b.size()) return common;
  return std::nullopt;
}

std::optional<size_t> first_text_divergence(std::string_view a, std::string_view b) {
  if (a == b) return std::nullopt;
  const size_t common = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < common && a[i] == b[i]) ++i;
  // Continuation bytes are 10xxxxxx: back up to the lead byte of the character that differs.
  auto continuation = [](std::string_view s, size_t at) {
    return at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80;
  };
  while (i > 0 && (continuation(a, i) || continuation(b, i))) --i;
  return i;
}

}  // namespace kvgate::scoring
