#include "core/percentile.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/error.h"

namespace kvgate {

double percentile_sorted(std::span<const double> sorted, double fraction) {
  if (sorted.empty()) throw_internal_error("percentile of an empty set of values (the caller must handle none)");
  if (fraction <= 0.0) return sorted.front();
  if (fraction >= 1.0) return sorted.back();
  const double position = fraction * static_cast<double>(sorted.size() - 1);
  const size_t below = static_cast<size_t>(position);
  const double weight = position - static_cast<double>(below);
  const size_t above = std::min(below + 1, sorted.size() - 1);
  // Written as a + w (b - a) rather than (1 - w) a + w b so that equal neighbours give
  // exactly that value, never a rounding neighbour of it.
  return sorted[below] + weight * (sorted[above] - sorted[below]);
}

double percentile(std::span<const double> values, double fraction) {
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  return percentile_sorted(sorted, fraction);
}

}  // namespace kvgate
