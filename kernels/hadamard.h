#pragma once
// Walsh–Hadamard rotations. HadamardRotation is the randomized R = H·D / sqrt(n): D a fixed
// diagonal of random signs (from a seed), H the Sylvester Hadamard matrix; TurboQuant's and
// kvgate's `rot=hadamard`. BlockWalshHadamard is llama.cpp's attention rotation (`rot=wht`): the
// plain, unsigned H / sqrt(n) on consecutive blocks of n. Both are orthogonal, cost O(n log n)
// and spread outlier channels over all coordinates, which is why engines rotate before scalar
// quantization. n must be a power of two.
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

// llama.cpp's rotation (PR #21038; src/llama-kv-cache.cpp ggml_gen_hadamard, applied per block
// by llama_mul_mat_hadamard): y = H_n x on each block of n consecutive elements, H_n the Sylvester
// matrix divided by sqrt(n), entries (-1)^popcount(i & j) / sqrt(n). H_n is symmetric and
// H_n H_n = I, so apply() is its own inverse. Arithmetic as ggml-cpu's fast transform
// (ops.cpp, ggml_compute_forward_fwht_impl): every element times 1/sqrtf(n) first, then the
// butterflies u + v, u - v with len = 1, 2, 4, ... (fwht_inplace's order).
class BlockWalshHadamard {
 public:
  BlockWalshHadamard() = default;
  BlockWalshHadamard(int size, int block)
      : size_(size), block_(block), scale_(1.0f / std::sqrt(static_cast<float>(block))) {}
  int size() const { return size_; }
  int block() const { return block_; }
  // out = H x blockwise (out may equal x).
  void apply(const float* x, float* out) const {
    for (int i = 0; i < size_; ++i) out[i] = x[i] * scale_;
    for (int b = 0; b < size_; b += block_) fwht_inplace(out + b, block_);
  }

 private:
  int size_ = 0;
  int block_ = 0;
  float scale_ = 1.0f;
};

// llama.cpp's block sizes (src/llama-kv-cache.cpp:340-356), 0 where it does not rotate: it
// rotates only when head_dim % 64 == 0. Keys: the largest power of two >= 64 dividing head_dim
// (64 -> 64, 128 -> 128, 192 -> 64); values: always 64.
inline constexpr int kLlamaCppRotationUnit = 64;
inline int llama_cpp_key_rotation_block(int head_dim) {
  if (head_dim <= 0 || head_dim % kLlamaCppRotationUnit != 0) return 0;
  int block = kLlamaCppRotationUnit;
  while (head_dim % (2 * block) == 0) block *= 2;
  return block;
}
inline int llama_cpp_value_rotation_block(int head_dim) {
  return head_dim > 0 && head_dim % kLlamaCppRotationUnit == 0 ? kLlamaCppRotationUnit : 0;
}
// The block rot=wht uses for FormatOptions::rotation_block (0 = the key rule, else that block,
// which the parser sets to llama.cpp's value block); 0 where llama.cpp would not rotate.
inline int wht_rotation_block(int head_dim, int option_block) {
  if (option_block == 0) return llama_cpp_key_rotation_block(head_dim);
  return head_dim > 0 && head_dim % kLlamaCppRotationUnit == 0 ? option_block : 0;
}

}  // namespace kvgate::kernels
