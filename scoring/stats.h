#pragma once
// Small statistics on plain numbers: mean with standard error and the paired bootstrap that
// gates use to decide whether a change between two configs or runs is real. Percentiles are
// core/percentile.h's.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvgate::scoring {

struct MeanStderr {
  double mean = 0.0;
  double standard_error = 0.0;
  size_t count = 0;
};

// Mean and its standard error sqrt(s^2 / n), s^2 the unbiased sample variance.
// n = 0 gives {0, 0, 0}; n = 1 gives a standard error of 0 (it is undefined, and 0 keeps
// reports printable).
MeanStderr mean_stderr(std::span<const double> values);

struct BootstrapCi {
  double mean_delta = 0.0;  // mean of (candidate - baseline) over the pairs
  double low = 0.0;         // lower end of the percentile interval
  double high = 0.0;
  size_t pairs = 0;
  size_t resamples = 0;
  double confidence = 0.0;
};

// Paired bootstrap of the mean delta (candidate[i] - baseline[i]). Each of `resamples`
// rounds draws n pair indices with replacement from core/rng.h seeded with `seed`, so the
// interval is bit-identical for the same inputs. The interval is the percentile interval:
// the (1-confidence)/2 and (1+confidence)/2 percentiles (core/percentile.h) of the resampled
// means. Identical inputs give mean 0 and the interval [0, 0].
// Throws kvgate::Error (input) on length mismatch, no pairs, resamples = 0, or a confidence
// outside (0, 1).
BootstrapCi paired_bootstrap_ci(std::span<const double> baseline, std::span<const double> candidate,
                                size_t resamples, double confidence, uint64_t seed);

}  // namespace kvgate::scoring
