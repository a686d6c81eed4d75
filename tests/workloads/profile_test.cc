#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/workloads/mooncake_traces.h"
#include "workloads/profile.h"
#include "workloads/trace.h"

namespace kvgate::workloads {
namespace {

using testing::have_real_mooncake;
using testing::kMooncakeReal;
using testing::kMooncakeSample;

TEST(Profile, PrefixReuseFollowsTheChainNotSingleIds) {
  // Request 2 repeats block id 9 but after a different first block: not reusable.
  const std::string text =
      "{\"timestamp_ms\": 0, \"input_tokens\": 20, \"output_tokens\": 1, \"block_tokens\": 8, \"hash_ids\": [1, 9, 4]}\n"
      "{\"timestamp_ms\": 1, \"input_tokens\": 16, \"output_tokens\": 1, \"block_tokens\": 8, \"hash_ids\": [2, 9]}\n"
      "{\"timestamp_ms\": 2, \"input_tokens\": 24, \"output_tokens\": 1, \"block_tokens\": 8, \"hash_ids\": [1, 9, 5]}\n";
  const PrefixReuse r = unbounded_prefix_reuse(parse_trace(text, "t.jsonl"));
  ASSERT_TRUE(r.known);
  EXPECT_EQ(r.blocks, 8u);
  EXPECT_EQ(r.reusable_blocks, 2u);  // request 3's [1, 9]
  EXPECT_EQ(r.tokens, 60);
  EXPECT_EQ(r.reusable_tokens, 16);
  EXPECT_DOUBLE_EQ(r.token_share(), 16.0 / 60.0);
}

TEST(Profile, TracesWithoutBlocksReportReuseAsUnknown) {
  const Trace t = parse_trace("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                              "0,ChatGPT,100,10,110,Conversation log\n"
                              "10,ChatGPT,300,30,330,Conversation log\n",
                              "b.csv");
  const WorkloadProfile p = profile_trace(t);
  EXPECT_FALSE(p.prefix.known);
  EXPECT_FALSE(p.sessions_known);
  EXPECT_EQ(p.requests, 2u);
  EXPECT_DOUBLE_EQ(p.duration_s, 10.0);
  EXPECT_DOUBLE_EQ(p.arrival_rate, 0.2);
  EXPECT_DOUBLE_EQ(p.prompt_tokens.mean, 200.0);
  EXPECT_DOUBLE_EQ(p.prompt_tokens.p50, 200.0);     // interpolated between 100 and 300
  EXPECT_DOUBLE_EQ(p.prompt_tokens.p95, 290.0);
  EXPECT_DOUBLE_EQ(p.output_tokens.max, 30.0);
  uint64_t counted = 0;
  for (const HistogramBucket& b : p.context_histogram) counted += b.count;
  EXPECT_EQ(counted, 2u);
  EXPECT_EQ(p.context_histogram.front().count, 2u);  // both below 1024 tokens
}

TEST(Profile, SessionsAndTurnsFromTheShapeFormat) {
  const std::string text =
      "{\"session\": \"a\", \"turn\": 1, \"timestamp_ms\": 0, \"input_tokens\": 2000, \"output_tokens\": 1}\n"
      "{\"session\": \"a\", \"turn\": 2, \"timestamp_ms\": 10, \"input_tokens\": 3000, \"output_tokens\": 1}\n"
      "{\"session\": \"a\", \"turn\": 3, \"timestamp_ms\": 20, \"input_tokens\": 5000, \"output_tokens\": 1}\n"
      "{\"session\": \"b\", \"turn\": 1, \"timestamp_ms\": 30, \"input_tokens\": 200000, \"output_tokens\": 1}\n";
  const WorkloadProfile p = profile_trace(parse_trace(text, "s.jsonl"));
  ASSERT_TRUE(p.sessions_known);
  EXPECT_EQ(p.sessions, 2u);
  EXPECT_DOUBLE_EQ(p.turns_per_session.mean, 2.0);
  EXPECT_DOUBLE_EQ(p.turns_per_session.max, 3.0);
  EXPECT_EQ(p.context_histogram.back().count, 1u);  // 200K tokens: the open-ended bucket
}

// Every statistic of a Mooncake trace recomputed here from the raw JSON lines, without the
// importer, and compared with the profile; returns the profile for trace-specific checks.
WorkloadProfile expect_profile_matches_independent_computation(const std::string& path) {
  const Trace trace = load_trace(path);
  const WorkloadProfile p = profile_trace(trace);

  std::ifstream in(path);
  std::string line;
  uint64_t n = 0;
  long double sum_in = 0, sum_out = 0;
  int64_t max_in = 0;
  double first_ts = 0, last_ts = 0;
  // Straightforward prefix reuse: a block is reusable when the exact list of ids up to and
  // including it was the prefix of an earlier prompt.
  std::set<std::vector<int64_t>> seen_prefixes;
  uint64_t blocks = 0, reusable_blocks = 0;
  int64_t tokens = 0, reusable_tokens = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto row = nlohmann::json::parse(line);
    const int64_t input = row["input_length"].get<int64_t>();
    const double ts = row["timestamp"].get<double>();
    if (n == 0) first_ts = ts;
    last_ts = ts;
    ++n;
    sum_in += input;
    sum_out += row["output_length"].get<int64_t>();
    max_in = std::max(max_in, input);
    tokens += input;
    std::vector<int64_t> prefix;
    bool intact = true;
    const auto& ids = row["hash_ids"];
    EXPECT_EQ(static_cast<int64_t>(ids.size()), (input + 511) / 512) << path << ":" << n;
    for (size_t i = 0; i < ids.size(); ++i) {
      prefix.push_back(ids[i].get<int64_t>());
      ++blocks;
      const bool before = seen_prefixes.count(prefix) > 0;
      if (intact && before) {
        ++reusable_blocks;
        reusable_tokens += std::min<int64_t>(512, input - static_cast<int64_t>(i) * 512);
      } else {
        intact = false;
      }
      seen_prefixes.insert(prefix);
    }
  }
  EXPECT_EQ(p.requests, n);
  EXPECT_EQ(p.bad_rows_skipped, 0u);
  EXPECT_NEAR(p.prompt_tokens.mean, static_cast<double>(sum_in / n), 1e-6);
  EXPECT_NEAR(p.output_tokens.mean, static_cast<double>(sum_out / n), 1e-6);
  EXPECT_DOUBLE_EQ(p.prompt_tokens.max, static_cast<double>(max_in));
  EXPECT_NEAR(p.duration_s, (last_ts - first_ts) / 1000.0, 1e-9);
  EXPECT_TRUE(p.prefix.known);
  EXPECT_EQ(p.prefix.blocks, blocks);
  EXPECT_EQ(p.prefix.reusable_blocks, reusable_blocks);
  EXPECT_EQ(p.prefix.tokens, tokens);
  EXPECT_EQ(p.prefix.reusable_tokens, reusable_tokens);
  // Sanity on the shape of this workload: multi-turn chat re-sends most of its context.
  EXPECT_GT(p.prefix.token_share(), 0.2);
  EXPECT_LT(p.prefix.token_share(), 0.95);
  return p;
}

TEST(Profile, MooncakeSampleMatchesIndependentComputation) {
  const WorkloadProfile p = expect_profile_matches_independent_computation(kMooncakeSample);
  // The sample as tests/data/make_mooncake_sample.py writes it.
  EXPECT_EQ(p.requests, 209u);
  EXPECT_EQ(std::lround(p.prompt_tokens.mean), 6273);
  EXPECT_EQ(std::lround(p.output_tokens.mean), 249);
  EXPECT_FALSE(p.sessions_known);
}

// The acceptance check on real traffic.
TEST(Profile, MooncakeConversationTraceMatchesIndependentComputation) {
  if (!have_real_mooncake()) GTEST_SKIP() << testing::real_mooncake_absent("the profile's independent recomputation");
  const WorkloadProfile p = expect_profile_matches_independent_computation(kMooncakeReal);
  EXPECT_EQ(p.requests, 12031u);
  EXPECT_EQ(std::lround(p.prompt_tokens.mean), 12035);
  EXPECT_EQ(std::lround(p.output_tokens.mean), 343);
}

}  // namespace
}  // namespace kvgate::workloads
