// Depth sweeps (issue 42): the sweep item, from-text --sweep, generate --sweep and --depth lists,
// and the suite fields that carry them.
#include "evalsets/sweep.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "evalsets/generate.h"
#include "evalsets/importers.h"
#include "evalsets/item.h"
#include "evalsets/suite.h"
#include "tests/evalsets/git_repo.h"

namespace kvgate::evalsets {
namespace {

using kvgate::testing::write_file;

std::string prose(int paragraphs, const std::string& tag = "") {
  std::string out;
  for (int i = 0; i < paragraphs; ++i)
    out += "Paragraph " + tag + std::to_string(i) +
           " tells how the harbour committee met in spring and agreed on the new rules for the boats. Nobody "
           "objected, and the minutes were signed before noon.\n\n";
  return out;
}

TEST(Sweep, BeginsAtASpaceAfterTheWarmup) {
  const std::string text = prose(3);
  const size_t begin = sweep_begin(text);
  ASSERT_NE(begin, std::string::npos);
  EXPECT_TRUE(text[begin] == ' ' || text[begin] == '\n');
  EXPECT_GE(estimate_tokens(std::string_view(text).substr(0, begin)), kSweepWarmupTokens);
  EXPECT_LT(estimate_tokens(std::string_view(text).substr(0, begin)), kSweepWarmupTokens + 8);
  EXPECT_EQ(sweep_begin("short text"), std::string::npos);
  // No space at all (CJK-like runs): a code-point boundary.
  std::string hangul;
  for (int i = 0; i < 200; ++i) hangul += "가";
  const size_t h = sweep_begin(hangul);
  ASSERT_NE(h, std::string::npos);
  EXPECT_EQ(h % 3, 0u);
}

TEST(Sweep, CutsAtAParagraphBreakWithinTheBudget) {
  const std::string text = prose(40);
  const size_t cut = sweep_cut(text, 0, 1000);
  EXPECT_LE(estimate_tokens(std::string_view(text).substr(0, cut)), 1000u);
  EXPECT_GE(estimate_tokens(std::string_view(text).substr(0, cut)), 1000u * kSweepMinFillPercent / 100);
  EXPECT_EQ(text.substr(cut, 2), "\n\n");
  EXPECT_EQ(sweep_cut(text, 0, 1000000), text.size());
  // One long paragraph: a sentence end instead.
  std::string one;
  for (int i = 0; i < 100; ++i) one += "The clerk wrote the notes. ";
  const size_t c = sweep_cut(one, 0, 300);
  EXPECT_EQ(one[c - 1], '.');
}

TEST(Sweep, ItemScoresEverythingAfterTheWarmup) {
  const EvalItem item = make_sweep_item("doc-1", "text", prose(10), {{"file", "a.md"}});
  ASSERT_TRUE(item.has_text);
  ASSERT_EQ(item.spans.size(), 1u);
  EXPECT_EQ(item.spans[0].end, item.text.size());
  EXPECT_EQ(item.spans[0].begin, sweep_begin(item.text));
  EXPECT_EQ(item.meta["sweep"]["warmup_tokens"], kSweepWarmupTokens);
  EXPECT_EQ(item.meta["file"], "a.md");
  EXPECT_FALSE(item.has_answer);
  EXPECT_TRUE(is_sweep_item(item));
  // It survives the loader.
  EXPECT_EQ(parse_items(canonical_line(item) + "\n", "s.jsonl").size(), 1u);
  try {
    make_sweep_item("tiny", "text", "too short", nullptr);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("item tiny: a depth sweep needs text after its warm-up"), std::string::npos);
  }
}

TEST(Sweep, DocumentOfAChatItemJoinsItsMessages) {
  const EvalItem g = generate_item("long_policy", 3, 0, {2000, 2400}, 500);
  const std::string doc = item_document(g);
  EXPECT_EQ(doc.find(g.messages[0].content), 0u);
  EXPECT_NE(doc.find(g.messages[1].content), std::string::npos);
  EXPECT_TRUE(doc.ends_with(g.messages.back().content));
}

TEST(FromTextSweep, EveryDocumentReachesTheSameDepth) {
  const std::string dir = ::testing::TempDir() + "from_text_sweep_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  write_file(dir + "/long.md", prose(120, "a"));
  write_file(dir + "/b/other.txt", prose(45, "b"));
  write_file(dir + "/short.txt", prose(5, "c"));
  FromTextOptions o;
  o.dir = dir;
  o.context_tokens = 1500;
  o.sweep = true;
  const ImportReport r = items_from_text(o);
  EXPECT_EQ(r.sources, 3u);
  ASSERT_GE(r.items.size(), 3u);
  EXPECT_GE(r.skipped_short, 2u);  // short.txt and the tails
  for (const EvalItem& item : r.items) {
    EXPECT_EQ(item.domain, "text");
    EXPECT_TRUE(is_sweep_item(item));
    EXPECT_EQ(item.meta["rule"], "sweep");
    const size_t t = estimate_tokens(item.text);
    EXPECT_LE(t, 1500u) << item.id;
    EXPECT_GE(t, 1350u) << item.id;
    EXPECT_EQ(item.spans[0].end, item.text.size());
    EXPECT_TRUE(item.text.rfind("Paragraph ", 0) == 0) << item.id;  // documents start at a paragraph
  }
  EXPECT_EQ(r.items[0].id, "text-0-sweep-0");
  EXPECT_EQ(r.items[0].meta["file"], "b/other.txt");
  EXPECT_EQ(parse_items(canonical_jsonl(r.items), "sweep.jsonl").size(), r.items.size());
  // Deterministic.
  EXPECT_EQ(canonical_jsonl(items_from_text(o).items), canonical_jsonl(r.items));
}

// A paragraph break at 80 % of the length is no place to cut: the piece would fall under
// kSweepMinFillPercent and be dropped (it was, when cuts took any break past 3/4), so the cut
// moves to a sentence end past 90 % and the file's first document is kept.
TEST(FromTextSweep, NoCutMakesADocumentItThenDrops) {
  std::string sentences;
  while (estimate_tokens(sentences) < 1200) sentences += "The clerk wrote the notes. ";
  sentences.pop_back();
  const std::string text = sentences + "\n\n" + sentences + "\n\n" + sentences;
  const size_t cut = sweep_cut(text, 0, 1500);
  EXPECT_GE(estimate_tokens(std::string_view(text).substr(0, cut)), 1500u * kSweepMinFillPercent / 100);
  EXPECT_LE(estimate_tokens(std::string_view(text).substr(0, cut)), 1500u);
  EXPECT_EQ(text[cut - 1], '.');

  const std::string dir = ::testing::TempDir() + "from_text_sweep_fill_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  write_file(dir + "/notes.txt", text);
  FromTextOptions o;
  o.dir = dir;
  o.context_tokens = 1500;
  o.sweep = true;
  const ImportReport r = items_from_text(o);
  ASSERT_EQ(r.items.size(), 2u);
  EXPECT_EQ(r.items[0].id, "text-0-sweep-0");
  EXPECT_EQ(r.items[1].id, "text-0-sweep-1");
  EXPECT_EQ(r.skipped_short, 1u);  // the tail
}

TEST(GenerateSweep, LongDocumentsAsSweeps) {
  GenerateOptions o{"long", 9, 2, {1500, 1800}};
  o.sweep = true;
  const std::vector<EvalItem> items = generate(o);
  ASSERT_EQ(items.size(), 12u);
  EXPECT_EQ(items[0].id, "retrieval-s9-sweep-0000");
  for (const EvalItem& item : items) {
    EXPECT_TRUE(is_sweep_item(item)) << item.id;
    EXPECT_FALSE(item.meta.contains("depth")) << item.id;
    const size_t t = estimate_tokens(item.text);
    EXPECT_GE(t, 1500u * 80 / 100) << item.id;
    EXPECT_LE(t, 1800u * 105 / 100) << item.id;
  }
  // The document of the item generated without --sweep, scored instead of asked about.
  const EvalItem plain = generate_item("long_tables", 9, 1, {1500, 1800});
  EXPECT_EQ(items[3].text, item_document(plain));
  EXPECT_EQ(canonical_jsonl(generate(o)), canonical_jsonl(items));
  GenerateOptions bad = o;
  bad.domain = "tables";
  EXPECT_THROW(generate(bad), Error);
  bad = o;
  bad.depths_permille = {500};
  EXPECT_THROW(generate(bad), Error);
}

TEST(GenerateDepths, EachHaystackAtEveryDepth) {
  EXPECT_EQ(parse_depths("0.1,0.5,1"), (std::vector<int>{100, 500, 1000}));
  EXPECT_THROW(parse_depths("0.1,0.1"), Error);
  EXPECT_THROW(parse_depths("0.1,"), Error);
  GenerateOptions o{"retrieval", 4, 2, {1500, 1800}};
  o.depths_permille = {100, 900};
  const std::vector<EvalItem> items = generate(o);
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[0].id, "retrieval-s4-d100-0000");
  EXPECT_EQ(items[1].id, "retrieval-s4-d900-0000");
  EXPECT_EQ(items[2].id, "retrieval-s4-d100-0001");
  // The same haystack, the needle moved: the same task and length.
  EXPECT_EQ(items[0].meta["task"], items[1].meta["task"]);
  EXPECT_EQ(items[0].meta["target_tokens"], items[1].meta["target_tokens"]);
  for (const EvalItem& item : items)
    EXPECT_EQ(generated_depth_permille(item.id), item.meta["depth"].get<double>() * 1000) << item.id;
  o.depths_permille = {1000};
  EXPECT_EQ(generated_depth_permille(generate(o)[0].id), 1000);
  EXPECT_FALSE(generated_depth_permille("retrieval-s4-0000").has_value());      // a drawn depth
  EXPECT_FALSE(generated_depth_permille("tables-s4-d100-0000").has_value());    // not a long domain
  EXPECT_FALSE(generated_depth_permille("retrieval-s4-d1100-0000").has_value());
  EXPECT_FALSE(generated_depth_permille("retrieval-sx-d100-0000").has_value());
  EXPECT_FALSE(generated_depth_permille("my-retrieval-s4-d100-0000").has_value());
}

TEST(SuiteSweep, SweepAndDepthListsParseAndKeepOlderHashes) {
  const Suite s = parse_suite(R"({"name": "x", "kv": ["q4_0"], "evalsets": [
      {"domain": "long_tables", "seed": 1, "n": 1, "tokens_min": 1500, "tokens_max": 1800, "sweep": true},
      {"domain": "retrieval", "seed": 2, "n": 1, "tokens_min": 1500, "tokens_max": 1800, "depth": [0.1, 0.9]},
      {"domain": "retrieval", "seed": 3, "n": 1, "depth": 0.5}]})",
                              "x.json");
  EXPECT_TRUE(s.evalsets[0].sweep);
  EXPECT_EQ(s.evalsets[1].depths_permille, (std::vector<int>{100, 900}));
  EXPECT_EQ(s.canonical["evalsets"][0]["sweep"], true);
  EXPECT_EQ(s.canonical["evalsets"][1]["depth"], nlohmann::json::array({0.1, 0.9}));
  EXPECT_EQ(s.canonical["evalsets"][2]["depth"], 0.5);  // one depth stays a number
  EXPECT_FALSE(s.canonical["evalsets"][2].contains("sweep"));
  const std::vector<EvalItem> items = materialize_suite(s);
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[0].id, "long_tables-s1-sweep-0000");
  for (const char* bad : {R"({"domain": "tables", "seed": 1, "n": 1, "sweep": true})",
                          R"({"domain": "retrieval", "seed": 1, "n": 1, "sweep": "yes"})",
                          R"({"domain": "retrieval", "seed": 1, "n": 1, "sweep": true, "depth": 0.5})",
                          R"({"domain": "retrieval", "seed": 1, "n": 1, "depth": []})",
                          R"({"domain": "retrieval", "seed": 1, "n": 1, "depth": [0.5, 0.5]})"}) {
    const std::string doc = std::string(R"({"name": "x", "kv": ["q4_0"], "evalsets": [)") + bad + "]}";
    try {
      parse_suite(doc, "bad.json");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find("bad.json: evalsets[0]: "), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kvgate::evalsets
