#include "scoring/stats.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/percentile.h"
#include "core/rng.h"

namespace kvgate::scoring {

MeanStderr mean_stderr(std::span<const double> values) {
  MeanStderr r;
  r.count = values.size();
  if (values.empty()) return r;
  double sum = 0.0;
  for (double v : values) sum += v;
  r.mean = sum / static_cast<double>(values.size());
  if (values.size() < 2) return r;
  // Two-pass variance: the mean is subtracted first so large offsets do not cancel.
  double squares = 0.0;
  for (double v : values) squares += (v - r.mean) * (v - r.mean);
  const double n = static_cast<double>(values.size());
  r.standard_error = std::sqrt(squares / (n - 1.0) / n);
  return r;
}

BootstrapCi paired_bootstrap_ci(std::span<const double> baseline, std::span<const double> candidate,
                                size_t resamples, double confidence, uint64_t seed) {
  if (baseline.size() != candidate.size())
    throw_input_error("paired bootstrap: baseline has " + std::to_string(baseline.size()) +
                      " values but candidate has " + std::to_string(candidate.size()));
  if (baseline.empty()) throw_input_error("paired bootstrap: no pairs");
  if (resamples == 0) throw_input_error("paired bootstrap: resamples must be at least 1");
  if (!(confidence > 0.0 && confidence < 1.0))
    throw_input_error("paired bootstrap: confidence " + std::to_string(confidence) + " is not in (0, 1)");

  const size_t n = baseline.size();
  std::vector<double> deltas(n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    deltas[i] = candidate[i] - baseline[i];
    sum += deltas[i];
  }
  BootstrapCi ci;
  ci.pairs = n;
  ci.resamples = resamples;
  ci.confidence = confidence;
  ci.mean_delta = sum / static_cast<double>(n);

  Rng rng(seed);
  std::vector<double> means(resamples);
  for (size_t b = 0; b < resamples; ++b) {
    double s = 0.0;
    for (size_t i = 0; i < n; ++i) s += deltas[rng.below(n)];
    means[b] = s / static_cast<double>(n);
  }
  std::sort(means.begin(), means.end());
  const double tail = (1.0 - confidence) / 2.0;
  ci.low = percentile_sorted(means, tail);
  ci.high = percentile_sorted(means, 1.0 - tail);
  return ci;
}

}  // namespace kvgate::scoring
