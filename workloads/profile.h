#pragma once
// The workload profile: what a team reads before choosing a KV format. Arrival rate, prompt
// and output lengths, session structure, and how much of the prompt traffic an unbounded
// prefix cache could serve.
#include <cstdint>
#include <string>
#include <vector>

#include "workloads/stats.h"
#include "workloads/trace.h"

namespace kvgate::workloads {

struct HistogramBucket {
  int64_t lo = 0;  // inclusive, tokens
  int64_t hi = 0;  // exclusive; 0 = no upper bound
  uint64_t count = 0;
};

struct PrefixReuse {
  bool known = false;  // false when the trace has no block ids
  int block_tokens = 0;
  uint64_t blocks = 0;           // prompt blocks over all requests
  uint64_t reusable_blocks = 0;  // blocks whose whole prefix chain an earlier request computed
  int64_t tokens = 0;            // prompt tokens over all requests
  int64_t reusable_tokens = 0;
  double block_share() const { return blocks ? static_cast<double>(reusable_blocks) / blocks : 0.0; }
  double token_share() const { return tokens ? static_cast<double>(reusable_tokens) / tokens : 0.0; }
};

struct WorkloadProfile {
  std::string source;
  std::string format;
  uint64_t requests = 0;
  uint64_t bad_rows_skipped = 0;
  double duration_s = 0;      // first to last arrival
  double arrival_rate = 0;    // requests per second over the duration; NaN when every request arrives at one instant
  Distribution prompt_tokens;
  Distribution output_tokens;
  int64_t total_prompt_tokens = 0;
  int64_t total_output_tokens = 0;
  bool sessions_known = false;
  uint64_t sessions = 0;
  Distribution turns_per_session;
  PrefixReuse prefix;
  std::vector<HistogramBucket> context_histogram;  // prompt + output tokens per request
};

// Reuse with an unbounded cache visited in arrival order: a block counts as reusable when an
// earlier request's prompt contained the same chain of block ids up to and including it.
PrefixReuse unbounded_prefix_reuse(const Trace& trace);
WorkloadProfile profile_trace(const Trace& trace);

}  // namespace kvgate::workloads
