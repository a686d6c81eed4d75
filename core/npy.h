#pragma once
// NumPy .npy files (format versions 1-3): the way users hand kvgate K/V tensors dumped from an
// engine (`np.save`) and get dequantized tensors back. Only what those dumps use is accepted:
// little-endian float16 or float32, C order. Everything in the file is validated before any
// allocation, so a malformed or truncated file is an input error naming the file and byte
// offset, never a crash or a huge allocation.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvgate {

enum class NpyDtype : uint8_t { f16, f32 };

struct NpyArray {
  std::vector<int64_t> shape;  // C order; the last axis is contiguous
  NpyDtype dtype = NpyDtype::f32;  // what the file stored; `data` is always float32
  std::vector<float> data;
  int64_t elements() const;
};

// `name` is what error messages call the buffer (normally the file path).
NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& name);
NpyArray read_npy(const std::string& path);

// Serializes a version-1.0 file; f16 output rounds to nearest even.
std::vector<uint8_t> encode_npy(const std::vector<int64_t>& shape, const float* data, NpyDtype dtype);
// Throws an environment error if the file cannot be written.
void write_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data,
               NpyDtype dtype = NpyDtype::f32);

}  // namespace kvgate
