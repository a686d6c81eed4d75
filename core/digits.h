#pragma once
// Whole numbers as people read them in tables and messages: 4096 -> "4,096".
#include <cstdint>
#include <string>

namespace kvgate {

inline std::string grouped_digits(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out = v < 0 ? "-" : "";
  for (size_t k = 0; k < digits.size(); ++k) {
    if (k > 0 && (digits.size() - k) % 3 == 0) out += ',';
    out += digits[k];
  }
  return out;
}

}  // namespace kvgate
