#include "workloads/profile.h"

#include <cmath>
#include <unordered_map>
#include <unordered_set>

namespace kvgate::workloads {

PrefixReuse unbounded_prefix_reuse(const Trace& trace) {
  PrefixReuse reuse;
  reuse.block_tokens = trace.block_tokens;
  for (const TraceRequest& r : trace.requests) reuse.tokens += r.input_tokens;
  if (trace.block_tokens <= 0) return reuse;
  reuse.known = true;
  std::unordered_set<uint64_t> seen;
  for (const TraceRequest& r : trace.requests) {
    uint64_t key = 0;
    bool prefix_intact = true;
    for (size_t i = 0; i < r.block_ids.size(); ++i) {
      key = chain_block_key(key, r.block_ids[i]);
      ++reuse.blocks;
      const bool inserted = seen.insert(key).second;
      if (prefix_intact && !inserted) {
        ++reuse.reusable_blocks;
        reuse.reusable_tokens += block_token_count(r, trace.block_tokens, i);
      } else {
        prefix_intact = false;
      }
    }
  }
  return reuse;
}

WorkloadProfile profile_trace(const Trace& trace) {
  WorkloadProfile p;
  p.source = trace.source;
  p.format = std::string(format_name(trace.format));
  p.requests = trace.requests.size();
  p.bad_rows_skipped = trace.bad_rows_skipped;
  std::vector<double> prompt, output;
  prompt.reserve(p.requests);
  output.reserve(p.requests);
  for (const TraceRequest& r : trace.requests) {
    prompt.push_back(static_cast<double>(r.input_tokens));
    output.push_back(static_cast<double>(r.output_tokens));
    p.total_prompt_tokens += r.input_tokens;
    p.total_output_tokens += r.output_tokens;
  }
  p.prompt_tokens = summarize(std::move(prompt));
  p.output_tokens = summarize(std::move(output));
  if (!trace.requests.empty()) p.duration_s = trace.requests.back().arrival_s - trace.requests.front().arrival_s;
  // Requests that all arrive at one instant have no rate (not 0 requests/s, nor infinitely many).
  p.arrival_rate = p.duration_s > 0 ? static_cast<double>(p.requests) / p.duration_s : std::nan("");

  if (trace.has_sessions) {
    std::unordered_map<int64_t, uint64_t> turns;
    for (const TraceRequest& r : trace.requests)
      if (r.session >= 0) ++turns[r.session];
    p.sessions_known = true;
    p.sessions = turns.size();
    std::vector<double> counts;
    counts.reserve(turns.size());
    for (const auto& [session, n] : turns) counts.push_back(static_cast<double>(n));
    p.turns_per_session = summarize(std::move(counts));
  }
  p.prefix = unbounded_prefix_reuse(trace);

  // Power-of-two buckets from 1K tokens to 128K and beyond: the sizes KV budgets are planned in.
  p.context_histogram.push_back({0, 1024, 0});
  for (int64_t lo = 1024; lo < 131072; lo *= 2) p.context_histogram.push_back({lo, lo * 2, 0});
  p.context_histogram.push_back({131072, 0, 0});
  for (const TraceRequest& r : trace.requests) {
    const int64_t ctx = r.input_tokens + r.output_tokens;
    for (HistogramBucket& b : p.context_histogram)
      if (ctx >= b.lo && (b.hi == 0 || ctx < b.hi)) {
        ++b.count;
        break;
      }
  }
  return p;
}

}  // namespace kvgate::workloads
