#include "scoring/latency.h"

#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/percentile.h"

namespace kvgate::scoring {

LatencyBreakdown derive_latency(std::span<const double> t) {
  if (t.empty()) throw_input_error("token timestamps: no tokens");
  for (size_t i = 0; i < t.size(); ++i) {
    if (!std::isfinite(t[i]) || t[i] < 0)
      throw_input_error("token timestamps: index " + std::to_string(i) + " is negative or not finite");
    if (i > 0 && t[i] < t[i - 1])
      throw_input_error("token timestamps: index " + std::to_string(i) + " is earlier than index " +
                        std::to_string(i - 1));
  }
  LatencyBreakdown b;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  b.tokens = t.size();
  b.ttft = t.front();
  b.latency = t.back();
  b.tpot = t.size() > 1 ? (b.latency - b.ttft) / static_cast<double>(t.size() - 1) : nan;
  for (size_t i = 1; i < t.size(); ++i) b.gaps.push_back(t[i] - t[i - 1]);
  if (b.gaps.empty()) {
    b.gap_p50 = b.gap_p90 = b.gap_p99 = b.gap_max = nan;
  } else {
    b.gap_p50 = percentile(b.gaps, 0.50);
    b.gap_p90 = percentile(b.gaps, 0.90);
    b.gap_p99 = percentile(b.gaps, 0.99);
    b.gap_max = percentile(b.gaps, 1.0);
  }
  return b;
}

}  // namespace kvgate::scoring
