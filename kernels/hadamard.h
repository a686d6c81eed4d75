#pragma once
// Randomized Walsh–Hadamard rotation R = H·D / sqrt(n): D is a fixed diagonal of random signs
// (from a seed), H the Sylvester Hadamard matrix. R is orthogonal, costs O(n log n), and spreads
// outlier channels evenly over all coordinates, which is why TurboQuant and llama.cpp's rotated
// caches apply it before scalar quantization. n must be a power of two.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace kvgate::kernels {

// In-place unnormalized fast Walsh–Hadamard transform (Sylvester ordering).
inline void fwht_inplace(float* x, int n) {
  for (int len = 1; len < n; len <<= 1)
    for (int i = 0; i < n; i += len << 1)
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
}

class HadamardRotation {
 public:
  HadamardRotation() = default;
  HadamardRotation(int n, uint64_t seed) : n_(n), signs_(n), scale_(1.0f / std::sqrt(static_cast<float>(n))) {
    Rng rng(seed);
    for (auto& s : signs_) s = (rng.next_u64() >> 63) ? -1.0f : 1.0f;
  }
  int size() const { return n_; }
  // out = R x (out may equal x).
  void forward(const float* x, float* out) const {
    for (int i = 0; i < n_; ++i) out[i] = x[i] * signs_[i];
    fwht_inplace(out, n_);
    for (int i = 0; i < n_; ++i) out[i] *= scale_;
  }
  // out = R^T x (out may equal x).
  void inverse(const float* x, float* out) const {
    for (int i = 0; i < n_; ++i) out[i] = x[i];
    fwht_inplace(out, n_);
    for (int i = 0; i < n_; ++i) out[i] *= scale_ * signs_[i];
  }

 private:
  int n_ = 0;
  std::vector<float> signs_;
  float scale_ = 1.0f;
};

}  // namespace kvgate::kernels
