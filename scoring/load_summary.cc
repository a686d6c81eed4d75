#include "scoring/load_summary.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/percentile.h"

namespace kvgate::scoring {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double pct(const std::vector<double>& sorted, double f) { return sorted.empty() ? kNaN : percentile_sorted(sorted, f); }

}  // namespace

LoadSummary summarize_load(std::span<const RequestTiming> requests, const LoadSlo& slo) {
  LoadSummary s;
  std::vector<double> ttft, tpot, latency;
  double first = std::numeric_limits<double>::infinity(), last = -std::numeric_limits<double>::infinity();
  double output_tokens = 0, cached = 0, prompt = 0;
  for (const RequestTiming& r : requests) {
    ++s.requests;
    first = std::min(first, r.arrival_ms);
    if (!r.ok) {
      ++s.failed;
      continue;
    }
    ++s.succeeded;
    output_tokens += static_cast<double>(r.output_tokens);
    if (std::isfinite(r.latency_ms)) last = std::max(last, r.arrival_ms + r.latency_ms);
    if (std::isfinite(r.ttft_ms)) ttft.push_back(r.ttft_ms);
    const bool has_tpot = std::isfinite(r.tpot_ms) && r.output_tokens >= 2;
    if (has_tpot) tpot.push_back(r.tpot_ms);
    if (std::isfinite(r.latency_ms)) latency.push_back(r.latency_ms);
    if (std::isfinite(r.ttft_ms) && r.ttft_ms <= slo.ttft_ms && (!has_tpot || r.tpot_ms <= slo.tpot_ms)) ++s.good;
    if (r.cached_tokens) {
      ++s.hit_reported;
      cached += static_cast<double>(*r.cached_tokens);
      prompt += static_cast<double>(r.prompt_tokens);
    }
  }
  for (auto* v : {&ttft, &tpot, &latency}) std::sort(v->begin(), v->end());
  s.ttft_p50 = pct(ttft, 0.5), s.ttft_p95 = pct(ttft, 0.95), s.ttft_p99 = pct(ttft, 0.99);
  s.tpot_p50 = pct(tpot, 0.5), s.tpot_p95 = pct(tpot, 0.95), s.tpot_p99 = pct(tpot, 0.99);
  s.latency_p50 = pct(latency, 0.5), s.latency_p99 = pct(latency, 0.99);
  s.duration_s = last > first ? (last - first) / 1000.0 : kNaN;
  const bool timed = std::isfinite(s.duration_s) && s.duration_s > 0;
  s.requests_per_s = timed ? static_cast<double>(s.succeeded) / s.duration_s : kNaN;
  s.output_tokens_per_s = timed ? output_tokens / s.duration_s : kNaN;
  s.goodput_per_s = timed ? static_cast<double>(s.good) / s.duration_s : kNaN;
  s.goodput_share = s.requests > 0 ? static_cast<double>(s.good) / static_cast<double>(s.requests) : kNaN;
  s.hit_rate = prompt > 0 ? cached / prompt : kNaN;
  return s;
}

}  // namespace kvgate::scoring
