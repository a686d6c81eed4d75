#pragma once
// Standard normal test data: the same floats for a seed on every machine (core/rng.h).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace kvgate::kernels {

inline std::vector<float> gaussian(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  return x;
}

}  // namespace kvgate::kernels
