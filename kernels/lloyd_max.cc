#include "kernels/lloyd_max.h"

#include <array>
#include <cmath>
#include <limits>
#include <mutex>

#include "core/error.h"

namespace kvgate::kernels {

double normal_pdf(double x) { return std::isinf(x) ? 0.0 : std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI); }

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

double normal_interval_mass(double a, double b) {
  // Both tails through erfc keep precision where the CDF is close to 1.
  if (a >= 0.0) return 0.5 * (std::erfc(a / std::sqrt(2.0)) - std::erfc(b / std::sqrt(2.0)));
  if (b <= 0.0) return 0.5 * (std::erfc(-b / std::sqrt(2.0)) - std::erfc(-a / std::sqrt(2.0)));
  return normal_cdf(b) - normal_cdf(a);
}

double normal_interval_mean(double a, double b) {
  // For the standard normal, integral of x phi(x) over [a, b] is phi(a) - phi(b).
  const double mass = normal_interval_mass(a, b);
  if (mass <= 0.0) return 0.5 * (a + b);
  return (normal_pdf(a) - normal_pdf(b)) / mass;
}

namespace {

// TurboQuant needs at most 5 bits (4 + an outlier bit); Lloyd's iteration count grows about
// 3.5x per bit (6 bits: ~9k iterations, 8 bits: ~110k), so the table stops at 6.
constexpr int kMaxBits = 6;

// Inverse of normal_cdf by bisection: only used to seed the solver, so simple beats fast.
double normal_quantile(double p) {
  double lo = -40.0, hi = 40.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (normal_cdf(mid) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

LloydMaxCodebook solve(int bits) {
  const int levels = 1 << bits;
  const double inf = std::numeric_limits<double>::infinity();
  LloydMaxCodebook cb;
  cb.bits = bits;
  cb.centroids.resize(levels);
  cb.thresholds.resize(levels - 1);
  // Lloyd's iteration converges to the unique optimum for a log-concave density from any
  // ordered start, but slowly for many levels; starting from the high-resolution optimum (point
  // density proportional to pdf^(1/3), i.e. the quantiles of N(0, 3)) cuts the iterations.
  for (int i = 0; i < levels; ++i) cb.centroids[i] = std::sqrt(3.0) * normal_quantile((i + 0.5) / levels);
  constexpr int kMaxIterations = 1000000;
  for (cb.iterations = 1; cb.iterations <= kMaxIterations; ++cb.iterations) {
    for (int i = 0; i + 1 < levels; ++i) cb.thresholds[i] = 0.5 * (cb.centroids[i] + cb.centroids[i + 1]);
    double moved = 0.0;
    for (int i = 0; i < levels; ++i) {
      const double lo = i == 0 ? -inf : cb.thresholds[i - 1];
      const double hi = i + 1 == levels ? inf : cb.thresholds[i];
      const double c = normal_interval_mean(lo, hi);
      moved = std::max(moved, std::abs(c - cb.centroids[i]));
      cb.centroids[i] = c;
    }
    if (moved < 1e-13) break;
  }
  KVGATE_CHECK(cb.iterations <= kMaxIterations, "Lloyd-Max iteration did not converge");
  for (int i = 0; i + 1 < levels; ++i) cb.thresholds[i] = 0.5 * (cb.centroids[i] + cb.centroids[i + 1]);
  // With centroids at the conditional means, E[(X - Q)^2] = E[X^2] - sum_i P_i c_i^2.
  double explained = 0.0;
  for (int i = 0; i < levels; ++i) {
    const double lo = i == 0 ? -inf : cb.thresholds[i - 1];
    const double hi = i + 1 == levels ? inf : cb.thresholds[i];
    explained += normal_interval_mass(lo, hi) * cb.centroids[i] * cb.centroids[i];
  }
  cb.distortion = 1.0 - explained;
  return cb;
}

}  // namespace

const LloydMaxCodebook& gaussian_lloyd_max(int bits) {
  if (bits < 1 || bits > kMaxBits) throw_usage_error("Lloyd-Max codebook: bits must be 1..6, got " + std::to_string(bits));
  static std::array<LloydMaxCodebook, kMaxBits + 1> cache;
  static std::array<std::once_flag, kMaxBits + 1> once;
  std::call_once(once[bits], [bits] { cache[bits] = solve(bits); });
  return cache[bits];
}

}  // namespace kvgate::kernels
