#pragma once
// Stable content hashes: xxHash64 for identities kvgate stores (configs, suites, items), and
// SHA-256 where users compare against published digests (model files).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvgate {

uint64_t xxhash64(const void* data, size_t size, uint64_t seed = 0);
inline uint64_t xxhash64(std::string_view s, uint64_t seed = 0) { return xxhash64(s.data(), s.size(), seed); }
std::string hex_u64(uint64_t v);  // 16 lowercase hex digits

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  std::string hex_digest();  // finishes the hash; call once

 private:
  void compress(const uint8_t* block);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const void* data, size_t size);
std::string sha256_file_hex(const std::string& path);  // throws environment error if unreadable

}  // namespace kvgate
