#include "workloads/stats.h"

#include <algorithm>
#include <cmath>

namespace kvgate::workloads {

double percentile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double rank = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Distribution summarize(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.count = values.size();
  // Summed in sorted order so the mean does not depend on the input order.
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  d.p50 = percentile_sorted(values, 0.50);
  d.p95 = percentile_sorted(values, 0.95);
  d.p99 = percentile_sorted(values, 0.99);
  d.max = values.back();
  return d;
}

}  // namespace kvgate::workloads
