#pragma once
// Percentiles of plain numbers, one definition for every module that reports them (the KLD
// report, latency gaps, gate intervals, workload profiles), so a p99 means the same everywhere.
#include <span>

namespace kvgate {

// Percentile by linear interpolation between closest ranks (numpy's default "linear", and
// llama.cpp's KLD report): position = fraction * (n - 1) in the ascending order, interpolated
// between the two neighbouring values. fraction <= 0 gives the minimum, fraction >= 1 the
// maximum, 0.5 the median (mean of the two middle values for even n).
// `sorted` must be ascending. An empty `sorted` has no percentile: it throws kvgate::Error
// (internal), because every caller decides what an empty set means for it (a NaN cell, a zero
// in a profile, no interval) before it asks.
double percentile_sorted(std::span<const double> sorted, double fraction);
// Same, on a sorted copy of `values`.
double percentile(std::span<const double> values, double fraction);

}  // namespace kvgate
