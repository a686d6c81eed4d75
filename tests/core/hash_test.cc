#include "core/hash.h"

#include <gtest/gtest.h>

#include <string>

namespace kvgate {
namespace {

// Digests from FIPS 180-2 appendix B.
TEST(Sha256, PublishedVectors) {
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, StreamingEqualsOneShot) {
  std::string data(1000003, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  Sha256 h;
  for (size_t off = 0; off < data.size(); off += 777) h.update(data.data() + off, std::min<size_t>(777, data.size() - off));
  EXPECT_EQ(h.hex_digest(), sha256_hex(data.data(), data.size()));
}

TEST(XxHash64, KnownValueAndSeed) {
  // The reference value of XXH64("", 0) from the xxHash specification.
  EXPECT_EQ(xxhash64("", 0, 0), 0xef46db3751d8e999ull);
  EXPECT_NE(xxhash64("kvgate", 0), xxhash64("kvgate", 1));
  EXPECT_EQ(hex_u64(0xef46db3751d8e999ull), "ef46db3751d8e999");
}

}  // namespace
}  // namespace kvgate
