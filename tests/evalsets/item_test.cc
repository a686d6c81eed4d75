#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "evalsets/item.h"

namespace kvgate::evalsets {
namespace {

const char* kGood =
    R"({"id":"a","domain":"custom","messages":[{"role":"user","content":"2+2?"},{"role":"assistant","content":"4"}],"score":{"kind":"answer"},"answer":"4"})";

// Returns the error message of parsing `jsonl` as file "f.jsonl", or "" when it parses.
std::string error_of(const std::string& jsonl) {
  try {
    parse_items(jsonl, "f.jsonl");
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  return "";
}

TEST(Item, ParsesAndRoundTripsCanonically) {
  const std::vector<EvalItem> items = parse_items(std::string(kGood) + "\n\n", "f.jsonl");
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].messages.size(), 2u);
  EXPECT_EQ(items[0].answer, "4");
  const std::string canonical = canonical_jsonl(items);
  EXPECT_EQ(canonical_jsonl(parse_items(canonical, "g")), canonical);
  EXPECT_EQ(canonical,
            R"({"answer":"4","domain":"custom","id":"a","messages":[{"content":"2+2?","role":"user"},{"content":"4","role":"assistant"}],"score":{"kind":"answer"}})"
            "\n");
}

TEST(Item, ScoredTargetsForEachKind) {
  const auto answer = parse_items(kGood, "f");
  auto t = scored_targets(answer[0]);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].message_index, 1u);
  EXPECT_EQ(t[0].end, 1u);

  const auto turns = parse_items(
      R"({"id":"t","domain":"agentic","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","content":"r","tool_call_id":"c1"},{"role":"assistant","content":"done"},{"role":"user","content":"b"},{"role":"assistant","content":"ok"}],"score":{"kind":"turns"}})",
      "f");
  t = scored_targets(turns[0]);
  ASSERT_EQ(t.size(), 2u);  // the tool-call message has no content to score
  EXPECT_EQ(t[0].message_index, 3u);
  EXPECT_EQ(t[1].message_index, 5u);
  EXPECT_EQ(tool_calls_text(turns[0].messages[1]), "<tool_call>\n{\"arguments\":{\"x\":1},\"name\":\"f\"}\n</tool_call>");

  const auto spans = parse_items(R"({"id":"s","domain":"text","text":"한국어 text here","score":{"kind":"spans","spans":[[3,6],[10,14]]}})", "f");
  t = scored_targets(spans[0]);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].message_index, ScoredTarget::kText);
  EXPECT_EQ(spans[0].text.substr(t[1].begin, t[1].end - t[1].begin), "text");
}

TEST(Item, ReportsFileAndLineOfEachProblem) {
  const std::string good = std::string(kGood) + "\n";
  struct Case {
    std::string line, problem;
  };
  const Case cases[] = {
      {"{not json", "invalid JSON"},
      {"[1,2]", "must be a JSON object"},
      {R"({"domain":"x","text":"abc","score":{"kind":"spans","spans":[[1,2]]}})", "missing field \"id\""},
      {R"({"id":5,"domain":"x","text":"abc","score":{"kind":"spans","spans":[[1,2]]}})", "\"id\" must be a string"},
      {R"({"id":"b","domain":"x","text":"abc","score":{"kind":"spans","spans":[[1,2]]},"extra":1})", "unknown field \"extra\""},
      {R"({"id":"b","domain":"X Y","text":"abc","score":{"kind":"spans","spans":[[1,2]]}})", "\"domain\" must be"},
      {R"({"id":"b","domain":"x","text":"abc","messages":[],"score":{"kind":"answer"}})", "exactly one of"},
      {R"({"id":"b","domain":"x","messages":[{"role":"user","content":""},{"role":"assistant","content":"4"}],"score":{"kind":"answer"}})", "messages[0]: empty content"},
      {R"({"id":"b","domain":"x","messages":[{"role":"robot","content":"a"}],"score":{"kind":"answer"}})", "role \"robot\""},
      {R"({"id":"b","domain":"x","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}],"score":{"kind":"answer"}})", "last message to be an assistant"},
      {R"({"id":"b","domain":"x","messages":[{"role":"user","content":"a","tool_calls":[]}],"score":{"kind":"answer"}})", "only allowed on assistant"},
      {R"({"id":"b","domain":"x","text":"abc","score":{"kind":"spans","spans":[[1,9]]}})", "past the end of text (3 bytes)"},
      {R"({"id":"b","domain":"x","text":"abc","score":{"kind":"spans","spans":[[2,1]]}})", "must be less than end"},
      {R"({"id":"b","domain":"x","text":"a한","score":{"kind":"spans","spans":[[1,2]]}})", "code-point boundaries"},
      {R"({"id":"b","domain":"x","text":"abc","score":{"kind":"spans","spans":[[1,-2]]}})", "non-negative integer"},
      {R"({"id":"b","domain":"x","text":"abc","score":{"kind":"guess"}})", "score kind \"guess\""},
      {R"({"id":"b","domain":"x","text":"abc"})", "missing field \"score\""},
      {R"({"id":"b","domain":"x","text":"abc","score":{"kind":"spans","spans":[[1,2]]},"meta":[]})", "\"meta\" must be an object"},
      {std::string(R"({"id":"b","domain":"x","text":"ab)") + "\xff" + R"(c","score":{"kind":"spans","spans":[[1,2]]}})", "invalid UTF-8 at byte 33"},
      {good.substr(0, good.size() - 1), "duplicate id \"a\" (first used on line 1)"},
  };
  for (const Case& c : cases) {
    const std::string message = error_of(good + "\n" + c.line + "\n");
    EXPECT_EQ(message.rfind("f.jsonl:3: ", 0), 0u) << c.line << " -> " << message;
    EXPECT_NE(message.find(c.problem), std::string::npos) << c.line << " -> " << message;
  }
}

TEST(Item, MissingFileIsInputError) {
  try {
    load_items("/nonexistent/items.jsonl");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/items.jsonl"), std::string::npos);
  }
}

TEST(Item, HashFollowsContent) {
  auto items = parse_items(kGood, "f");
  const uint64_t h = evalset_hash(items);
  EXPECT_EQ(evalset_hash(parse_items(kGood, "other-name")), h);
  items[0].answer += '5';
  EXPECT_NE(evalset_hash(items), h);
}

TEST(Item, TokenEstimateFollowsTheDefaultTokenizersCosts) {
  EXPECT_EQ(estimate_tokens(std::string(400, 'a')), 80u);   // letters: 5 per token
  EXPECT_EQ(estimate_tokens(std::string(40, '7')), 40u);    // digits: one token each
  EXPECT_EQ(estimate_tokens(std::string(30, ',')), 20u);    // punctuation: ~1.5 per token
  std::string hangul;
  for (int i = 0; i < 100; ++i) hangul += "한";
  EXPECT_EQ(estimate_tokens(hangul), 250u);                 // Hangul: ~2.5 tokens per syllable
}

}  // namespace
}  // namespace kvgate::evalsets
