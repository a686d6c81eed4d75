#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "core/error.h"
#include "workloads/trace.h"

namespace kvgate::workloads {
namespace {

// Runs `fn` and returns the kvgate::Error message; fails the test if nothing is thrown.
template <class Fn>
std::string error_of(Fn fn, int expected_exit = 2) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), expected_exit) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a kvgate::Error";
  return "";
}

TEST(Importers, MooncakeRowsBecomeSecondsAnd512TokenBlocks) {
  const std::string text =
      "{\"timestamp\": 1500, \"input_length\": 600, \"output_length\": 7, \"hash_ids\": [0, 1]}\n"
      "{\"timestamp\": 500, \"input_length\": 512, \"output_length\": 3, \"hash_ids\": [0]}\n";
  const Trace t = parse_trace(text, "mc.jsonl");
  EXPECT_EQ(t.format, TraceFormat::mooncake);
  EXPECT_EQ(t.block_tokens, 512);
  ASSERT_EQ(t.requests.size(), 2u);
  // Sorted by arrival and shifted so the first request arrives at 0.
  EXPECT_DOUBLE_EQ(t.requests[0].arrival_s, 0.0);
  EXPECT_DOUBLE_EQ(t.requests[1].arrival_s, 1.0);
  EXPECT_EQ(t.requests[1].input_tokens, 600);
  EXPECT_EQ(t.requests[1].block_ids, (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(block_token_count(t.requests[1], 512, 1), 88);
  EXPECT_FALSE(t.has_sessions);
}

TEST(Importers, BadRowAbortsNamingFileAndLine) {
  const std::string text =
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n"
      "\n"
      "{\"timestamp\": 1, \"input_length\": -4, \"output_length\": 1, \"hash_ids\": [0]}\n";
  const std::string msg = error_of([&] { parse_trace(text, "mc.jsonl"); });
  EXPECT_NE(msg.find("mc.jsonl:3:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("input_length"), std::string::npos) << msg;
}

TEST(Importers, SkipPolicyCountsBadRowsAndKeepsTheRest) {
  const std::string text =
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n"
      "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0, 1]}\n"
      "not json at all\n"
      "{\"timestamp\": 2, \"input_length\": 1025, \"output_length\": 1, \"hash_ids\": [0, 1, 2]}\n";
  const Trace t = parse_trace(text, "mc.jsonl", TraceFormat::automatic, BadRowPolicy::skip);
  EXPECT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.bad_rows_skipped, 2u);
  EXPECT_EQ(t.rows_read, 4u);
  EXPECT_NE(t.first_bad_row.find("mc.jsonl:2: hash_ids has 2 entries"), std::string::npos) << t.first_bad_row;
}

TEST(Importers, MissingFieldAndWrongTypesAreReported) {
  EXPECT_NE(error_of([] { parse_trace("{\"timestamp\": 0, \"input_length\": 5}\n", "a.jsonl", TraceFormat::mooncake); })
                .find("a.jsonl:1: missing field \"output_length\""),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_trace("{\"timestamp\": \"x\", \"input_length\": 5, \"output_length\": 1}\n", "a.jsonl",
                          TraceFormat::mooncake);
            }).find("timestamp"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_trace("{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [-1]}\n",
                          "a.jsonl", TraceFormat::mooncake);
            }).find("hash_ids"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_trace("{\"timestamp\": 0, \"input_length\": 99999999999, \"output_length\": 1}\n", "a.jsonl",
                          TraceFormat::mooncake);
            }).find("implausibly large"),
            std::string::npos);
}

TEST(Importers, EmptyOrUnrecognisedFilesAreInputErrors) {
  EXPECT_NE(error_of([] { parse_trace("\n\n", "e.jsonl"); }).find("no valid requests"), std::string::npos);
  EXPECT_NE(error_of([] { parse_trace("hello,world\n1,2\n", "x.csv"); }).find("x.csv:1: cannot tell"),
            std::string::npos);
  EXPECT_NE(error_of([] { load_trace("/nonexistent/trace.jsonl"); }).find("/nonexistent/trace.jsonl"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_format_name("parquet"); }).find("mooncake"), std::string::npos);
}

TEST(Importers, AzureCsvParsesDateTimesToSeconds) {
  const std::string text =
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2023-11-16 18:15:46.6805900,4808,10\n"
      "2023-11-16 18:15:50.2,3180,8\n"
      "2023-11-17 00:00:00,100,1\n";
  const Trace t = parse_trace(text, "azure.csv");
  EXPECT_EQ(t.format, TraceFormat::azure);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_NEAR(t.requests[1].arrival_s, 3.51941, 1e-6);
  EXPECT_NEAR(t.requests[2].arrival_s, (24 - 18) * 3600.0 - 15 * 60 - 46.68059, 1e-6);
  EXPECT_EQ(t.requests[0].input_tokens, 4808);
  EXPECT_EQ(t.requests[0].output_tokens, 10);
  EXPECT_EQ(t.block_tokens, 0);
  EXPECT_EQ(parse_trace("\xEF\xBB\xBF" + text, "bom.csv").requests.size(), 3u);
  EXPECT_NE(error_of([] { parse_trace("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-01 00:00:00,1,1\n", "a.csv"); })
                .find("a.csv:2:"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_trace("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-01 00:00:00,1\n", "a.csv"); })
                .find("has 2 columns"),
            std::string::npos);
}

TEST(Importers, BurstGptCsvUsesNamedColumns) {
  const std::string text =
      "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
      "5,ChatGPT,472,18,490,Conversation log\n"
      "45,ChatGPT,1087,230,1317,Conversation log\n"
      "118,GPT-4,417,0,417,API log\n";
  const Trace t = parse_trace(text, "burst.csv");
  EXPECT_EQ(t.format, TraceFormat::burstgpt);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_DOUBLE_EQ(t.requests[2].arrival_s, 113.0);
  EXPECT_EQ(t.requests[1].input_tokens, 1087);
  EXPECT_EQ(t.requests[2].output_tokens, 0);
  EXPECT_NE(error_of([] { parse_trace("Timestamp,Model,Request tokens\n1,a,2\n", "b.csv", TraceFormat::burstgpt); })
                .find("no column \"Response tokens\""),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_trace("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,a,x,1,1,API log\n",
                          "b.csv");
            }).find("b.csv:2: column \"Request tokens\""),
            std::string::npos);
}

TEST(Importers, BailianChainsParentsIntoSessions) {
  const std::string text =
      "{\"chat_id\": 10, \"parent_chat_id\": -1, \"timestamp\": 1.5, \"input_length\": 40, \"output_length\": 5, "
      "\"type\": \"text\", \"turn\": 1, \"hash_ids\": [1, 2, 3]}\n"
      "{\"chat_id\": 11, \"parent_chat_id\": -1, \"timestamp\": 2.0, \"input_length\": 16, \"output_length\": 5, "
      "\"type\": \"search\", \"turn\": 1, \"hash_ids\": [7]}\n"
      "{\"chat_id\": 12, \"parent_chat_id\": 10, \"timestamp\": 9.0, \"input_length\": 70, \"output_length\": 5, "
      "\"type\": \"text\", \"turn\": 2, \"hash_ids\": [1, 2, 3, 4, 5]}\n";
  const Trace t = parse_trace(text, "qwen.jsonl");
  EXPECT_EQ(t.format, TraceFormat::bailian);
  EXPECT_EQ(t.block_tokens, 16);
  EXPECT_TRUE(t.has_sessions);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_DOUBLE_EQ(t.requests[2].arrival_s, 7.5);  // seconds, not milliseconds
  EXPECT_EQ(t.requests[0].session, t.requests[2].session);
  EXPECT_NE(t.requests[0].session, t.requests[1].session);
  EXPECT_EQ(t.requests[2].turn, 2);
  EXPECT_NE(error_of([] {
              parse_trace("{\"chat_id\": 1, \"parent_chat_id\": -1, \"timestamp\": 0, \"input_length\": 16, "
                          "\"output_length\": 1, \"turn\": 1, \"hash_ids\": [1, 2]}\n",
                          "q.jsonl");
            }).find("q.jsonl:1: hash_ids has 2 entries"),
            std::string::npos);
}

TEST(Importers, BailianParentLinksMustFormAForest) {
  auto row = [](int chat, int parent) {
    return "{\"chat_id\": " + std::to_string(chat) + ", \"parent_chat_id\": " + std::to_string(parent) +
           ", \"timestamp\": 0, \"input_length\": 16, \"output_length\": 1}\n";
  };
  EXPECT_NE(error_of([&] { parse_trace(row(1, -1) + row(2, 2), "q.jsonl"); }).find("q.jsonl:2: chat 2 is its own parent"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_trace(row(1, 3) + row(2, 1) + row(3, 2), "q.jsonl"); })
                .find("q.jsonl:3: parent_chat_id 2 descends from chat 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_trace(row(1, -1) + row(2, 1) + row(1, 2), "q.jsonl"); })
                .find("q.jsonl:3: chat_id 1 is on an earlier row too"),
            std::string::npos);
  // Children before their parent's row, and siblings, are a forest.
  const Trace t = parse_trace(row(3, 1) + row(4, 1) + row(1, -1) + row(5, 3), "q.jsonl");
  ASSERT_EQ(t.requests.size(), 4u);
  for (const auto& r : t.requests) EXPECT_EQ(r.session, t.requests[0].session);
}

TEST(Importers, KvgateShapeFormatRoundTrips) {
  const std::string text =
      "{\"session\": \"agent-1\", \"turn\": 1, \"timestamp_ms\": 0, \"input_tokens\": 20, \"output_tokens\": 4, "
      "\"block_tokens\": 8, \"hash_ids\": [5, 6, 7]}\n"
      "{\"session\": \"agent-1\", \"turn\": 2, \"timestamp_ms\": 2500.5, \"input_tokens\": 30, \"output_tokens\": 4, "
      "\"block_tokens\": 8, \"hash_ids\": [5, 6, 8, 9]}\n"
      "{\"session\": 7, \"timestamp_ms\": 100, \"input_tokens\": 3, \"output_tokens\": 1}\n";
  const Trace t = parse_trace(text, "k.jsonl");
  EXPECT_EQ(t.format, TraceFormat::kvgate);
  EXPECT_EQ(t.block_tokens, 8);
  EXPECT_TRUE(t.has_sessions);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_DOUBLE_EQ(t.requests[2].arrival_s, 2.5005);

  std::ostringstream out;
  write_kvgate_trace(t, out);
  const Trace back = parse_trace(out.str(), "back.jsonl");
  ASSERT_EQ(back.requests.size(), t.requests.size());
  for (size_t i = 0; i < t.requests.size(); ++i) {
    EXPECT_DOUBLE_EQ(back.requests[i].arrival_s, t.requests[i].arrival_s);
    EXPECT_EQ(back.requests[i].input_tokens, t.requests[i].input_tokens);
    EXPECT_EQ(back.requests[i].output_tokens, t.requests[i].output_tokens);
    EXPECT_EQ(back.requests[i].block_ids, t.requests[i].block_ids);
    EXPECT_EQ(back.requests[i].turn, t.requests[i].turn);
  }
  EXPECT_EQ(back.requests[0].session, back.requests[2].session);
  EXPECT_NE(back.requests[0].session, back.requests[1].session);

  EXPECT_NE(error_of([] {
              parse_trace("{\"timestamp_ms\": 0, \"input_tokens\": 8, \"output_tokens\": 1, \"hash_ids\": [1]}\n",
                          "k.jsonl");
            }).find("must appear together"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_trace("{\"timestamp_ms\": 0, \"input_tokens\": 8, \"output_tokens\": 1, \"block_tokens\": 8, "
                          "\"hash_ids\": [1]}\n{\"timestamp_ms\": 0, \"input_tokens\": 8, \"output_tokens\": 1, "
                          "\"block_tokens\": 4, \"hash_ids\": [1, 2]}\n",
                          "k.jsonl");
            }).find("k.jsonl:2: \"block_tokens\" is 4"),
            std::string::npos);
}

TEST(Importers, ChainKeysDependOnTheWholePrefix) {
  const uint64_t a = chain_block_key(chain_block_key(0, 1), 2);
  const uint64_t b = chain_block_key(chain_block_key(0, 3), 2);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, chain_block_key(chain_block_key(0, 1), 2));
}

}  // namespace
}  // namespace kvgate::workloads
