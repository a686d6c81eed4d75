#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "core/error.h"
#include "workloads/generate.h"
#include "workloads/profile.h"

namespace kvgate::workloads {
namespace {

std::string written(const Trace& t) {
  std::ostringstream out;
  write_kvgate_trace(t, out);
  return out.str();
}

TEST(Generate, SameSeedSameBytesOtherSeedOtherTrace) {
  AgenticOptions o;
  o.sessions = 10, o.concurrency = 4, o.rounds = 3;
  const std::string a = written(generate_agentic_trace(o));
  EXPECT_EQ(a, written(generate_agentic_trace(o)));
  o.seed = 2;
  EXPECT_NE(a, written(generate_agentic_trace(o)));
}

TEST(Generate, SessionsRoundsAndGrowingContexts) {
  AgenticOptions o;
  o.sessions = 9, o.concurrency = 3, o.rounds = 4, o.block_tokens = 16;
  o.system_tokens = 100, o.session_prefix_tokens = 50, o.input_tokens = 40, o.output_tokens = 20, o.jitter = 0;
  const Trace t = generate_agentic_trace(o);
  ASSERT_EQ(t.requests.size(), 36u);
  for (size_t i = 1; i < t.requests.size(); ++i) EXPECT_LE(t.requests[i - 1].arrival_s, t.requests[i].arrival_s);
  std::map<int64_t, std::vector<const TraceRequest*>> by_session;
  for (const TraceRequest& r : t.requests) by_session[r.session].push_back(&r);
  ASSERT_EQ(by_session.size(), 9u);
  for (const auto& [s, turns] : by_session) {
    ASSERT_EQ(turns.size(), 4u);
    for (size_t k = 0; k < turns.size(); ++k) {
      const TraceRequest& r = *turns[k];
      EXPECT_EQ(r.turn, static_cast<int>(k) + 1);
      // Each round re-sends the previous prompt and answer, then 40 new tokens.
      EXPECT_EQ(r.input_tokens, 150 + static_cast<int64_t>(k) * 60 + 40);
      EXPECT_EQ(r.block_ids.size(), static_cast<size_t>((r.input_tokens + 15) / 16));
      if (k > 0) {
        const TraceRequest& prev = *turns[k - 1];
        const size_t full_prev = static_cast<size_t>(prev.input_tokens / 16);
        for (size_t b = 0; b < full_prev; ++b) EXPECT_EQ(r.block_ids[b], prev.block_ids[b]);
      }
    }
  }
  // Six full blocks of system prompt are shared across every session.
  const TraceRequest& a = *by_session[0][0];
  const TraceRequest& b = *by_session[5][0];
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(a.block_ids[i], b.block_ids[i]);
  EXPECT_NE(a.block_ids[6], b.block_ids[6]);

  // At most `concurrency` sessions overlap in time.
  std::map<int64_t, std::pair<double, double>> span;
  for (const TraceRequest& r : t.requests) {
    auto [it, fresh] = span.emplace(r.session, std::make_pair(r.arrival_s, r.arrival_s));
    if (!fresh) it->second.second = std::max(it->second.second, r.arrival_s);
  }
  for (const auto& [s, sp] : span) {
    int overlapping = 0;
    for (const auto& [s2, sp2] : span) overlapping += sp2.first <= sp.first && sp.first <= sp2.second;
    EXPECT_LE(overlapping, 3);
  }

  const WorkloadProfile p = profile_trace(t);
  EXPECT_EQ(p.sessions, 9u);
  EXPECT_DOUBLE_EQ(p.turns_per_session.mean, 4.0);
  EXPECT_GT(p.prefix.token_share(), 0.5);
}

TEST(Generate, OutOfRangeOptionsAreUsageErrors) {
  AgenticOptions o;
  o.sessions = 0;
  try {
    generate_agentic_trace(o);
    FAIL() << "expected a usage error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("--sessions"), std::string::npos);
  }
  o = {};
  o.block_tokens = 0;
  EXPECT_THROW(generate_agentic_trace(o), Error);
  o = {};
  o.rounds = 10000, o.input_tokens = 10'000'000;
  EXPECT_THROW(generate_agentic_trace(o), Error);
}

}  // namespace
}  // namespace kvgate::workloads
