// Writes the mutated-input corpus of tests/cli/input_fuzz_test.cc to a directory, to rerun one
// mutant by hand: make_input_corpus OUT_DIR [RESULTS_DB [SEED [PER_KIND]]]. The GGUF seed is the
// committed tiny qwen2 model; without RESULTS_DB (a database holding a complete run, as the test
// makes with `kvgate eval` on that model) no database mutants are written.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/gguf.h"
#include "tests/cli/input_corpus.h"

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_input_corpus OUT_DIR [RESULTS_DB [SEED [PER_KIND]]]\n");
    return 2;
  }
  const std::string out = argv[1];
  const std::string model = std::string(KVGATE_SOURCE_DIR) + "/tests/golden/tiny_models/tiny-qwen2.gguf";
  kvgate::testing::CorpusSeeds seeds;
  seeds.gguf = slurp(model);
  if (argc > 2) seeds.db = slurp(argv[2]);
  const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 20261204;
  const size_t per_kind = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 24;
  const auto gguf = kvgate::runtime::GgufFile::open(model);
  std::filesystem::create_directories(out);
  size_t n = 0;
  for (const auto& f : kvgate::testing::make_input_corpus(seed, seeds, gguf.data_section_offset(), per_kind)) {
    std::ofstream(out + "/" + f.name, std::ios::binary) << f.bytes;
    ++n;
  }
  // Issue 40's targeted cases: their files, and one line each saying how to run them.
  std::ofstream index(out + "/issue40-cases.txt");
  for (const auto& c : kvgate::testing::finding_cases(seeds)) {
    if (!c.bytes.empty()) std::ofstream(out + "/" + c.name, std::ios::binary) << c.bytes;
    index << "finding " << c.finding << " " << c.name << ": kvgate " << c.args << "  => exit " << c.exit_code
          << (c.sql.empty() ? "" : "  (after on the database: " + c.sql + ")") << "\n";
    ++n;
  }
  std::printf("%zu files in %s (seed %llu, %zu per kind)\n", n, out.c_str(), static_cast<unsigned long long>(seed), per_kind);
  return 0;
}
