// Replays the committed fuzzing corpus (tests/fuzz/corpus) through the reader in the regular
// test suite, so every input the fuzzer found interesting stays covered without clang.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "core/error.h"
#include "runtime/gguf.h"

namespace kvgate::runtime {
namespace {

namespace fs = std::filesystem;

TEST(GgufCorpus, EveryFileParsesOrIsAnInputError) {
  const fs::path dir = fs::path(KVGATE_SOURCE_DIR) / "tests" / "fuzz" / "corpus";
  size_t files = 0, parsed = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    ++files;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    try {
      const GgufFile f = GgufFile::parse(bytes, entry.path().filename().string());
      ++parsed;
      for (const GgufTensor& t : f.tensors()) {
        ASSERT_LE(t.file_offset + t.n_bytes, bytes.size()) << entry.path();
        ASSERT_EQ(t.file_offset % f.alignment(), 0u) << entry.path();
      }
      try {
        read_model_arch(f);
      } catch (const Error& e) {
        EXPECT_EQ(e.exit_code(), 2) << entry.path() << ": " << e.what();
      }
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << entry.path() << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << entry.path();
    }
  }
  EXPECT_GE(files, 6u) << "corpus missing or emptied: " << dir;
  EXPECT_GE(parsed, 6u) << "the valid seeds should still parse";
}

}  // namespace
}  // namespace kvgate::runtime
