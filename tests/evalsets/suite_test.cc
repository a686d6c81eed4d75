#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "core/error.h"
#include "evalsets/suite.h"
#include "evalsets/sweep.h"
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

// long-cpu-sweep: needles at controlled depths, each haystack at every depth of the list, so the
// gold accuracy per depth compares the same haystacks.
TEST(Suite, LongCpuSweepMovesTheNeedlesThroughTheSameHaystacks) {
  const Suite s = load_suite(std::string(KVGATE_SOURCE_DIR) + "/ci/suites/long-cpu-sweep.json");
  EXPECT_EQ(s.name, "long-cpu-sweep");
  const Suite full = load_suite(std::string(KVGATE_SOURCE_DIR) + "/ci/suites/long-cpu.json");
  EXPECT_EQ(s.kv, full.kv);
  EXPECT_EQ(s.ref, full.ref);
  const auto items = materialize_suite(s);
  ASSERT_EQ(items.size(), 15u);
  std::set<std::string> tasks;
  std::map<int, size_t> depths;
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(items[i].domain, "retrieval");
    tasks.insert(items[i].meta["task"].get<std::string>());
    ++depths[*generated_depth_permille(items[i].id)];
    // The three depths of one haystack: the same task and length target (a multi-value answer
    // lists its values in document order, which moving the needle changes).
    EXPECT_EQ(items[i].meta["task"], items[i - i % 3].meta["task"]) << items[i].id;
    EXPECT_EQ(items[i].meta["target_tokens"], items[i - i % 3].meta["target_tokens"]) << items[i].id;
    EXPECT_LE(estimate_tokens(items[i]), 1250u) << items[i].id;
  }
  EXPECT_EQ(tasks.size(), 5u);
  EXPECT_EQ(depths, (std::map<int, size_t>{{100, 5}, {500, 5}, {900, 5}}));
}

// The long suites are depth sweeps: every document of a suite (or of a --limit band) is long
// enough to reach the same deepest bucket, so every bucket up to it holds the same documents.
TEST(Suite, LongSuitesAreDepthSweepsWithinTheirContexts) {
  for (const std::string name : {"long-cpu", "long-cpu-ci", "long"}) {
    const Suite s = load_suite(std::string(KVGATE_SOURCE_DIR) + "/ci/suites/" + name + ".json");
    EXPECT_EQ(s.name, name);
    const auto items = materialize_suite(s);
    EXPECT_EQ(suite_hash(s, items), suite_hash(load_suite(s.file), materialize_suite(s)));
    std::map<std::string, size_t> domains;
    for (const EvalItem& item : items) {
      ++domains[item.domain];
      EXPECT_TRUE(is_sweep_item(item)) << name << " " << item.id;
    }
    if (name == std::string("long-cpu")) {
      EXPECT_EQ(items.size(), 6u);  // docs/perf.md times exactly this suite
      for (const std::string& d : long_generator_domains()) EXPECT_EQ(domains[d], 1u) << d;
      // SmolLM2's 8192-token context holds up to ~1.24x the estimate (diffs); every document
      // reaches 4-8k (real tokens are at least ~0.97x the estimate).
      for (const EvalItem& item : items) {
        EXPECT_LE(estimate_tokens(item), 6150u) << item.id;
        EXPECT_GE(estimate_tokens(item), 4400u) << item.id;
      }
    } else if (name == std::string("long-cpu-ci")) {
      EXPECT_EQ(items.size(), 3u);
      const Suite full = load_suite(std::string(KVGATE_SOURCE_DIR) + "/ci/suites/long-cpu.json");
      EXPECT_EQ(s.kv, full.kv);
      EXPECT_EQ(s.ref, full.ref);
      for (const EvalItem& item : items) {  // every one reaches 2-4k
        EXPECT_LE(estimate_tokens(item), 3300u) << item.id;
        EXPECT_GE(estimate_tokens(item), 2250u) << item.id;
      }
    } else {
      EXPECT_EQ(items.size(), 24u);
      for (const std::string& d : long_generator_domains()) EXPECT_EQ(domains[d], 4u) << d;
      // Bands of 6, shortest first: --limit 6 fits 16k, --limit 12 fits 32k (Gemma 3 270M).
      for (size_t i = 0; i < items.size(); ++i) {
        const size_t t = estimate_tokens(items[i]);
        EXPECT_GE(t, i < 6 ? 9000u : i < 12 ? 20000u : i < 18 ? 42000u : 85000u) << items[i].id;
        EXPECT_LE(t, i < 6 ? 12750u : i < 12 ? 26600u : i < 18 ? 61200u : 112200u) << items[i].id;
      }
    }
  }
}

TEST(Suite, DepthIsForLongDomainsAndPartOfTheIds) {
  const Suite s = parse_suite(
      R"({"name":"d","evalsets":[{"domain":"retrieval","seed":1,"n":1,"depth":0.25,"tokens_min":2000,"tokens_max":3000},)"
      R"({"domain":"retrieval","seed":1,"n":1,"depth":1,"tokens_min":2000,"tokens_max":3000}],"kv":["q8_0"]})",
      "s.json");
  EXPECT_EQ(s.evalsets[0].depths_permille, std::vector<int>{250});
  EXPECT_EQ(s.evalsets[1].depths_permille, std::vector<int>{1000});
  EXPECT_EQ(s.canonical["evalsets"][0]["depth"], 0.25);
  const auto items = materialize_suite(s);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].id, "retrieval-s1-d250-0000");
  EXPECT_EQ(items[1].id, "retrieval-s1-d1000-0000");
  EXPECT_NE(suite_error(R"({"name":"x","evalsets":[{"domain":"tables","seed":1,"n":1,"depth":0.5}],"kv":["fp8"]})")
                .find("evalsets[0]: \"depth\" applies to the long domains"),
            std::string::npos);
  for (const char* bad : {"1.5", "-0.5", "\"half\"", "0.1234"})
    EXPECT_NE(suite_error(std::string(R"({"name":"x","evalsets":[{"domain":"retrieval","seed":1,"n":1,"depth":)") + bad +
                          R"(}],"kv":["fp8"]})")
                  .find("evalsets[0]: \"depth\" must be a number from 0 to 1"),
              std::string::npos)
        << bad;
  EXPECT_NE(suite_error(R"({"name":"x","evalsets":[{"domain":"tables","seed":1,"n":1,"tokens_min":100,"tokens_max":40000}],"kv":["fp8"]})")
                .find("tokens-max <= 32768 for domain tables"),
            std::string::npos);
  EXPECT_EQ(suite_error(R"({"name":"x","evalsets":[{"domain":"long","seed":1,"n":1,"tokens_min":100,"tokens_max":131072}],"kv":["fp8"]})"), "");
}

}  // namespace
}  // namespace kvgate::evalsets
