#include "workloads/stats.h"

#include <algorithm>
#include <cmath>

#include "core/percentile.h"

namespace kvgate::workloads {

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
