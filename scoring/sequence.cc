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

}  // namespace kvgate::scoring
