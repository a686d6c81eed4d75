#pragma once
// Common base for the per-token formats (one token per group): it owns the optional
// Walsh-Hadamard rotation (rot=hadamard or llama.cpp's rot=wht) and gives allocation-free reference dot/axpy by decoding one row into a stack buffer.
// A format supplies encode_row_ref/decode_row_ref in the stored (possibly rotated) basis and
// may override encode_row/decode_row with bit-identical fast versions.
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/hadamard.h"
#include "kernels/kv_format.h"
#include "kernels/simd_avx2.h"

namespace kvgate::kernels {

// make_codec rejects larger head dims, so a row always fits this stack buffer.
inline constexpr int kMaxHeadDim = 1024;

class QuantizedCodec : public Codec {
 public:
  // Rotations only where the entry accepts rot: hadamard (randomized, whole head) or wht
  // (llama.cpp's plain blocks, only when head_dim % 64 == 0, as llama.cpp decides).
  QuantizedCodec(const FormatInfo& info, int head_dim, const FormatOptions& options) : Codec(info, head_dim, options) {
    if (options.rotation == Rotation::none) return;
    if (options.rotation == Rotation::qr)
      throw_usage_error("KV format " + std::string(info.name) + " supports only rot=hadamard or rot=wht, not rot=qr");
    if (!info.accepts(kOptionRotation))
      throw_usage_error("KV format " + std::string(info.name) + " does not take a rotation option");
    if (options.rotation == Rotation::hadamard) {
      if ((head_dim & (head_dim - 1)) != 0)
        throw_usage_error("KV format " + std::string(info.name) + " with rot=hadamard needs a power-of-two head_dim, got " +
                          std::to_string(head_dim));
      hadamard_ = HadamardRotation(head_dim, options.seed);
      return;
    }
    const int block = wht_rotation_block(head_dim, options.rotation_block);
    if (block == 0) return;  // llama.cpp leaves such a head unrotated
    if ((block & (block - 1)) != 0 || head_dim % block != 0)
      throw_usage_error("KV format " + std::string(info.name) + ": rot=wht block " + std::to_string(block) +
                        " is not a power of two dividing head_dim " + std::to_string(head_dim));
    wht_ = BlockWalshHadamard(head_dim, block);
  }

  bool rotates() const override { return hadamard_.size() != 0 || wht_.size() != 0; }
  // The Walsh-Hadamard block of rot=wht (0 for the other rotations and where wht is skipped).
  int wht_block() const { return wht_.size() != 0 ? wht_.block() : 0; }
  void prepare_query(const float* q, float* q_prepared) const override {
    if (rotates()) rotate(q, q_prepared);
    else std::memcpy(q_prepared, q, sizeof(float) * head_dim_);
  }
  void finish_output(float* acc) const override {
    if (rotates()) unrotate(acc, acc);
  }

  void quantize_ref(const float* x, uint8_t* dst) const override {
    if (!rotates()) return encode_row_ref(x, dst);
    float rotated[kMaxHeadDim];
    rotate(x, rotated);
    encode_row_ref(rotated, dst);
  }
  void quantize(const float* x, uint8_t* dst) const override {
    if (!rotates()) return encode_row(x, dst);
    float rotated[kMaxHeadDim];
    rotate(x, rotated);
    encode_row(rotated, dst);
  }
  void dequantize_ref(const uint8_t* src, float* y) const override {
    decode_row_ref(src, y);
    if (rotates()) unrotate(y, y);
  }
  void dequantize(const uint8_t* src, float* y) const override {
    decode_row(src, y);
    if (rotates()) unrotate(y, y);
  }
  void dequantize_stored_ref(const uint8_t* src, float* y) const override { decode_row_ref(src, y); }

  float dot_ref(const float* q_prepared, const uint8_t* src, int) const override {
    float row[kMaxHeadDim];
    decode_row_ref(src, row);
    double sum = 0.0;
    for (int i = 0; i < head_dim_; ++i) sum += static_cast<double>(q_prepared[i]) * row[i];
    return static_cast<float>(sum);
  }
  void axpy_ref(float w, const uint8_t* src, int, float* acc) const override {
    float row[kMaxHeadDim];
    decode_row_ref(src, row);
    for (int i = 0; i < head_dim_; ++i) acc[i] += w * row[i];
  }

  // Formats without a fused decoder: decode each row once (fast decode where the format has
  // one) and reuse it for every query; formats with fused kernels override these and fall back
  // here.
  void dot_rows(const float* q, int n_q, const uint8_t* groups, int n_tokens, float* scores) const override {
    float row[kMaxHeadDim];
    const size_t gb = group_bytes();
    for (int t = 0; t < n_tokens; ++t) {
      decode_row(groups + static_cast<size_t>(t) * gb, row);
      for (int qi = 0; qi < n_q; ++qi)
        scores[static_cast<size_t>(qi) * n_tokens + t] = simd::dot_f32(q + static_cast<size_t>(qi) * head_dim_, row, head_dim_);
    }
  }
  void axpy_rows(const float* w, int n_q, const uint8_t* groups, int n_tokens, float* acc) const override {
    float row[kMaxHeadDim];
    const size_t gb = group_bytes();
    for (int t = 0; t < n_tokens; ++t) {
      decode_row(groups + static_cast<size_t>(t) * gb, row);
      for (int qi = 0; qi < n_q; ++qi)
        simd::axpy_f32(w[static_cast<size_t>(qi) * n_tokens + t], row, acc + static_cast<size_t>(qi) * head_dim_, head_dim_);
    }
  }

 protected:
  virtual void encode_row_ref(const float* x, uint8_t* dst) const = 0;
  virtual void decode_row_ref(const uint8_t* src, float* y) const = 0;
  virtual void encode_row(const float* x, uint8_t* dst) const { encode_row_ref(x, dst); }
  virtual void decode_row(const uint8_t* src, float* y) const { decode_row_ref(src, y); }

 private:
  // out = R x and out = R^T x (out may equal x); wht is symmetric, its own inverse.
  void rotate(const float* x, float* out) const {
    if (wht_.size() != 0) wht_.apply(x, out);
    else hadamard_.forward(x, out);
  }
  void unrotate(const float* x, float* out) const {
    if (wht_.size() != 0) wht_.apply(x, out);
    else hadamard_.inverse(x, out);
  }

  HadamardRotation hadamard_;
  BlockWalshHadamard wht_;
};

template <class C>
std::unique_ptr<Codec> make_quantized_codec(const FormatInfo& info, int head_dim, const FormatOptions& options) {
  return std::make_unique<C>(info, head_dim, options);
}

}  // namespace kvgate::kernels
