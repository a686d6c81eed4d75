#pragma once
// The one summary of a load replay's requests against one config (docs/engine-mode.md, "Load
// replay"): what `kvgate replay --trace SHAPE --endpoint` prints, `kvgate runs show` lists and
// the report tabulates, from the same stored rows.
//
// Definitions:
//   TTFT, TPOT, latency   percentiles over the requests that succeeded (TPOT over those with at
//                         least two output tokens); ms from the request's arrival in the trace,
//                         so queueing in the client (--max-inflight) and the engine counts;
//   duration              first arrival to last completion (s);
//   throughput            succeeded requests and their output tokens per second of duration;
//   goodput               requests that succeeded within both SLOs (TTFT <= slo_ttft_ms and,
//                         with two or more tokens, TPOT <= slo_tpot_ms) per second of duration,
//                         and as a share of all requests;
//   prefix-cache hit rate Σ cached prompt tokens / Σ prompt tokens over the requests whose
//                         engine reported cached tokens (NaN when none did).
#include <cstdint>
#include <optional>
#include <span>

namespace kvgate::scoring {

struct RequestTiming {
  bool ok = false;
  double arrival_ms = 0;  // since the replay's start
  double ttft_ms = 0, tpot_ms = 0, latency_ms = 0;  // NaN where not measured
  int64_t prompt_tokens = 0, output_tokens = 0;
  std::optional<int64_t> cached_tokens;
};

struct LoadSlo {
  double ttft_ms = 0, tpot_ms = 0;
};

struct LoadSummary {
  int64_t requests = 0, succeeded = 0, failed = 0, good = 0;
  double ttft_p50 = 0, ttft_p95 = 0, ttft_p99 = 0;
  double tpot_p50 = 0, tpot_p95 = 0, tpot_p99 = 0;
  double latency_p50 = 0, latency_p99 = 0;
  double duration_s = 0;
  double requests_per_s = 0, output_tokens_per_s = 0;
  double goodput_per_s = 0, goodput_share = 0;
  double hit_rate = 0;
  int64_t hit_reported = 0;  // requests whose engine reported cached tokens
};

// NaN for every quantity no request measured.
LoadSummary summarize_load(std::span<const RequestTiming> requests, const LoadSlo& slo);

}  // namespace kvgate::scoring
