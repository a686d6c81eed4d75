#pragma once
// Order statistics shared by the profile and the simulator.
#include <cstdint>
#include <vector>

namespace kvgate::workloads {

struct Distribution {
  uint64_t count = 0;
  double mean = 0, p50 = 0, p95 = 0, p99 = 0, max = 0;
};

// Percentiles by linear interpolation between closest ranks (numpy's default, core/percentile.h),
// so they match what a notebook computes from the same numbers. Takes the values by value: it
// sorts them. No values give the all-zero Distribution (count 0), which profiles print as is.
Distribution summarize(std::vector<double> values);

}  // namespace kvgate::workloads
