#pragma once
// Synthetic agentic traffic in the shape format: sessions that share one system prompt, each
// with its own long prefix (tools, repository context), then rounds of new input and output
// that every later round re-sends. `concurrency` sessions are active at a time; when one ends,
// the next starts in its slot. The same options and seed give the same trace, byte for byte.
#include <cstdint>

#include "workloads/trace.h"

namespace kvgate::workloads {

struct AgenticOptions {
  int sessions = 100;
  int concurrency = 32;
  int rounds = 8;
  int64_t system_tokens = 2000;          // shared by every session
  int64_t session_prefix_tokens = 6000;  // private to a session, sent with every round
  int64_t input_tokens = 800;            // new tokens per round (mean)
  int64_t output_tokens = 300;           // generated tokens per round (mean)
  double jitter = 0.25;                  // per-round lengths vary uniformly by +-jitter
  double round_interval_s = 15.0;        // from one round's arrival to the next in a session
  double session_gap_s = 2.0;            // idle time in a slot between two sessions
  int block_tokens = 16;
  uint64_t seed = 1;
};

// Throws a usage error naming the option when one is out of range.
Trace generate_agentic_trace(const AgenticOptions& options);

}  // namespace kvgate::workloads
