#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "evalsets/suite.h"
#include "tests/evalsets/git_repo.h"

namespace kvgate::evalsets {
namespace {

using kvgate::testing::write_file;

std::string suite_error(const std::string& json_text) {
  try {
    parse_suite(json_text, "s.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  return "";
}

TEST(Suite, BuiltInSuitesLoadMaterializeAndHashStably) {
  for (const std::string name : {"smoke", "nightly"}) {
    const Suite s = load_suite(std::string(KVGATE_SOURCE_DIR) + "/ci/suites/" + name + ".json");
    EXPECT_EQ(s.name, name);
    EXPECT_EQ(s.ref, "f16");
    EXPECT_GE(s.kv.size(), 4u);
    const auto items = materialize_suite(s);
    EXPECT_EQ(suite_hash(s, items), suite_hash(load_suite(s.file), materialize_suite(s)));
    size_t agentic = 0;
    for (const EvalItem& item : items) {
      agentic += item.domain == "agentic";
      // The default model has an 8k context; measured real/estimated token ratios are <= 1.16.
      const size_t limit = name != std::string("smoke") ? 6500u : item.domain == "agentic" ? 1000u : 650u;
      EXPECT_LE(estimate_tokens(item), limit) << item.id;
    }
    EXPECT_GE(agentic, name == "smoke" ? 1u : 6u);
    if (name == std::string("smoke")) {
      EXPECT_EQ(items.size(), 25u);  // 2 per domain and 15 lookup items
    } else {
      EXPECT_EQ(items.size(), 54u);  // docs/perf.md times exactly this suite
    }
  }
}

TEST(Suite, BuiltInNameResolvesThroughTheSearchPath) {
  const Suite s = load_suite("smoke");
  EXPECT_TRUE(s.file.ends_with("smoke.json")) << s.file;
  try {
    load_suite("no_such_suite");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("no built-in suite \"no_such_suite\""), std::string::npos);
  }
}

TEST(Suite, FileEvalsetsResolveRelativeToTheSuiteAndChangeTheHash) {
  const std::string dir = ::testing::TempDir() + "suite_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const std::string item =
      R"({"id":"mine-1","domain":"custom","messages":[{"role":"user","content":"Capital of France?"},{"role":"assistant","content":"Paris"}],"score":{"kind":"answer"}})";
  write_file(dir + "/sets/mine.jsonl", item + "\n");
  const std::string suite_text =
      R"({"name":"mine","evalsets":[{"path":"sets/mine.jsonl"},{"domain":"tables","seed":3,"n":2}],"kv":["q8_0"]})";
  write_file(dir + "/mine.json", suite_text);
  const Suite s = load_suite(dir + "/mine.json");
  const auto items = materialize_suite(s);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].id, "mine-1");
  EXPECT_EQ(items[1].id, "tables-s3-0000");
  const uint64_t before = suite_hash(s, items);
  write_file(dir + "/sets/mine.jsonl", item.substr(0, item.size() - 1) + R"(,"answer":"Paris"})" + "\n");
  EXPECT_NE(suite_hash(s, materialize_suite(s)), before);

  write_file(dir + "/dup.json",
             R"({"name":"dup","evalsets":[{"path":"sets/mine.jsonl"},{"path":"sets/mine.jsonl"}],"kv":["q8_0"]})");
  try {
    materialize_suite(load_suite(dir + "/dup.json"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dup.json: evalsets[1] and evalsets[0] both have an item with id \"mine-1\""),
              std::string::npos)
        << e.what();
  }
}

TEST(Suite, BadSuitesNameTheProblem) {
  EXPECT_NE(suite_error("{").find("s.json: at byte"), std::string::npos);
  EXPECT_NE(suite_error(R"({"name":"x","evalsets":[{"domain":"tables","seed":1,"n":1}]})").find("s.json: \"kv\""), std::string::npos);
  EXPECT_NE(suite_error(R"({"name":"x","evalsets":[{"domain":"tables","seed":1,"n":1}],"kv":["fp8"],"colour":1})")
                .find("unknown field \"colour\""),
            std::string::npos);
  EXPECT_NE(suite_error(R"({"name":"x","evalsets":[{"domain":"sports","seed":1,"n":1}],"kv":["fp8"]})")
                .find("evalsets[0]: unknown domain \"sports\""),
            std::string::npos);
  EXPECT_NE(suite_error(R"({"name":"x","evalsets":[{"domain":"tables","seed":1,"n":0}],"kv":["fp8"]})").find("\"n\" must be"),
            std::string::npos);
  EXPECT_NE(suite_error(R"({"name":"x","evalsets":[{"domain":"tables","seed":-1,"n":1}],"kv":["fp8"]})")
                .find("\"seed\" must be a non-negative integer"),
            std::string::npos);
  EXPECT_NE(suite_error(R"({"name":"x","evalsets":[{"domain":"tables","seed":1,"n":1,"tokens_min":100}],"kv":["fp8"]})")
                .find("both \"tokens_min\" and \"tokens_max\""),
            std::string::npos);
  EXPECT_NE(suite_error(R"({"name":"x","evalsets":[{"path":"a.jsonl","seed":1}],"kv":["fp8"]})").find("only \"path\""),
            std::string::npos);
  EXPECT_NE(suite_error(R"({"name":"x","evalsets":[{"domain":"tables","seed":1,"n":1}],"kv":["fp8","fp8"]})")
                .find("listed twice"),
            std::string::npos);
  EXPECT_EQ(suite_error(R"({"name":"x","evalsets":[{"domain":"all","seed":1,"n":1}],"kv":["fp8"]})"), "");
}

}  // namespace
}  // namespace kvgate::evalsets
