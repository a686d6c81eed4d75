#pragma once
// Latency derived from raw per-token timestamps, the way serving benchmarks report it.
#include <cstddef>
#include <span>
#include <vector>

namespace kvgate::scoring {

struct LatencyBreakdown {
  size_t tokens = 0;
  double ttft = 0.0;     // time to first token: timestamp of token 0
  double latency = 0.0;  // timestamp of the last token
  // (latency - TTFT) / (n - 1); NaN for a single token, where no per-output-token time exists.
  double tpot = 0.0;
  std::vector<double> gaps;  // t[i+1] - t[i], n - 1 values
  // Percentiles of the gaps (definition in scoring/stats.h); NaN when there are no gaps.
  double gap_p50 = 0.0, gap_p90 = 0.0, gap_p99 = 0.0, gap_max = 0.0;
};

// token_times: when each output token was emitted, measured from the request's arrival, in
// any one unit (the results keep milliseconds). They must be finite, non-negative and
// non-decreasing, and there must be at least one (kvgate::Error input otherwise, naming the
// offending index).
LatencyBreakdown derive_latency(std::span<const double> token_times);

}  // namespace kvgate::scoring
