#include "scoring/intervals.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <string>

#include "core/error.h"

namespace kvgate::scoring {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

void check_probability(double p, const char* what) {
  if (!(p > 0.0 && p < 1.0)) throw_input_error(std::string(what) + ": probability " + std::to_string(p) + " is not in (0, 1)");
}

void check_confidence(double confidence) {
  if (!(confidence > 0.0 && confidence < 1.0))
    throw_input_error("confidence " + std::to_string(confidence) + " is not in (0, 1)");
}

// The x in [lo, hi] where the increasing function f crosses `target`, by bisection to the last bit.
template <typename F>
double solve_increasing(F f, double target, double lo, double hi) {
  for (int i = 0; i < 200 && lo < hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    (f(mid) < target ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// P(T <= t) for Student's t with whole df >= 1 (A&S 26.7.3 odd df, 26.7.4 even df).
double student_t_cdf(double t, int64_t df) {
  const double theta = std::atan(std::fabs(t) / std::sqrt(static_cast<double>(df)));
  const double s = std::sin(theta), c = std::cos(theta), c2 = c * c;
  double a = 0;  // P(|T| < |t|)
  if (df % 2 == 1) {
    double term = c, sum = df > 1 ? c : 0;  // cos θ, then ×(2k/(2k+1)) cos²θ per step
    for (int64_t k = 1; 2 * k + 1 <= df - 2; ++k) {
      term *= c2 * static_cast<double>(2 * k) / static_cast<double>(2 * k + 1);
      sum += term;
    }
    a = 2.0 / M_PI * (theta + s * sum);
  } else {
    double term = 1, sum = 1;  // 1, then ×((2k−1)/(2k)) cos²θ per step
    for (int64_t k = 1; 2 * k <= df - 2; ++k) {
      term *= c2 * static_cast<double>(2 * k - 1) / static_cast<double>(2 * k);
      sum += term;
    }
    a = s * sum;
  }
  return t >= 0 ? 0.5 + 0.5 * a : 0.5 - 0.5 * a;
}

// A Wilson score interval for a rate `p` observed on `n` (effective) observations at quantile `q`.
std::pair<double, double> wilson(double p, double n, double q) {
  const double q2n = q * q / n;
  const double center = (p + q2n / 2) / (1 + q2n);
  const double half = q / (1 + q2n) * std::sqrt(p * (1 - p) / n + q2n / (4 * n));
  return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

}  // namespace

double normal_quantile(double p) {
  check_probability(p, "normal quantile");
  return solve_increasing(normal_cdf, p, -40.0, 40.0);
}

double student_t_quantile(double p, int64_t df) {
  check_probability(p, "t quantile");
  if (df < 1) throw_input_error("t quantile: " + std::to_string(df) + " degrees of freedom (at least 1)");
  if (df > 1000) {
    // Cornish-Fisher expansion in 1/df (A&S 26.7.5): within 1e-12 of the exact quantile here,
    // where the exact CDF's series would take df/2 terms per evaluation.
    const double x = normal_quantile(p), v = static_cast<double>(df);
    const double x2 = x * x;
    const double g1 = (x2 + 1) * x / 4;
    const double g2 = ((5 * x2 + 16) * x2 + 3) * x / 96;
    const double g3 = (((3 * x2 + 19) * x2 + 17) * x2 - 15) * x / 384;
    const double g4 = ((((79 * x2 + 776) * x2 + 1482) * x2 - 1920) * x2 - 945) * x / 92160;
    return x + g1 / v + g2 / (v * v) + g3 / (v * v * v) + g4 / (v * v * v * v);
  }
  double hi = 1;
  while (student_t_cdf(hi, df) < std::max(p, 1 - p)) hi *= 2;
  return solve_increasing([df](double t) { return student_t_cdf(t, df); }, p, -hi, hi);
}

Interval paired_difference_interval(int64_t discordant_ref, int64_t discordant_cand, int64_t pairs, double confidence) {
  check_confidence(confidence);
  if (discordant_ref < 0 || discordant_cand < 0 || discordant_ref + discordant_cand > pairs)
    throw_input_error("paired difference: " + std::to_string(discordant_ref) + " + " + std::to_string(discordant_cand) +
                      " discordant pairs of " + std::to_string(pairs));
  Interval out;
  out.units = static_cast<size_t>(std::max<int64_t>(pairs, 0));
  if (pairs == 0) {
    out.estimate = out.low = out.high = out.spread = kNaN;
    return out;
  }
  const double n = static_cast<double>(pairs), b = static_cast<double>(discordant_ref),
               c = static_cast<double>(discordant_cand);
  out.estimate = (b - c) / n;
  // Tango's score statistic for H: difference = d, with the cell probability of the candidate's
  // discordant pairs at its maximum-likelihood value under H (Tango 1998). Decreasing in d.
  auto score = [&](double d) {
    const double A = 2 * n, B = -b - c + (2 * n - b + c) * d, C = -c * d * (1 - d);
    const double p21 = (std::sqrt(std::max(0.0, B * B - 4 * A * C)) - B) / (2 * A);
    const double var = n * (2 * p21 + d * (1 - d));
    const double num = b - c - n * d;
    if (!(var > 0)) return num > 0 ? kInf : num < 0 ? -kInf : 0.0;
    return num / std::sqrt(var);
  };
  const double z = normal_quantile(0.5 + confidence / 2);
  // The interval is {d : -z <= score(d) <= z}; -score is increasing.
  auto neg = [&](double d) { return -score(d); };
  out.low = score(-1.0) <= z ? -1.0 : solve_increasing(neg, -z, -1.0, out.estimate);
  out.high = score(1.0) >= -z ? 1.0 : solve_increasing(neg, z, out.estimate, 1.0);
  out.spread = std::max(out.high - out.estimate, out.estimate - out.low) * std::sqrt(n) / z;
  return out;
}

Interval clustered_ratio_interval(std::span<const ItemRatio> items, RatioKind kind, double confidence) {
  check_confidence(confidence);
  Interval out;
  double sum = 0, weight = 0, weight_sq = 0;
  size_t k = 0;
  for (const ItemRatio& it : items) {
    if (!(it.weight > 0)) continue;
    ++k;
    sum += it.sum;
    weight += it.weight;
    weight_sq += it.weight * it.weight;
  }
  out.units = k;
  if (k == 0) {
    out.estimate = out.low = out.high = out.spread = kNaN;
    return out;
  }
  out.estimate = sum / weight;
  if (k == 1) {
    // One item shows no spread between items: the data bound nothing.
    out.low = 0;
    out.high = kind == RatioKind::rate ? 1.0 : kInf;
    out.spread = kNaN;
    return out;
  }
  // Cluster-robust variance of the ratio: the items' residuals sum - estimate × weight.
  double squares = 0;
  for (const ItemRatio& it : items)
    if (it.weight > 0) squares += (it.sum - out.estimate * it.weight) * (it.sum - out.estimate * it.weight);
  const double kd = static_cast<double>(k);
  const double var = kd / (kd - 1) * squares / (weight * weight);
  const double q = student_t_quantile(0.5 + confidence / 2, static_cast<int64_t>(k) - 1);
  if (kind == RatioKind::mean) {
    const double half = q * std::sqrt(var);
    out.low = std::max(0.0, out.estimate - half);
    out.high = out.estimate + half;
    out.spread = std::sqrt(var * kd);
    return out;
  }
  const double p = std::clamp(out.estimate, 0.0, 1.0);
  // Effective observations: what the between-item variance implies (never more than the
  // tokens or turns themselves); with no event at all, one per item (Kish's count for unequal items).
  const double n_eff = var > 0 ? std::min(weight, p * (1 - p) / var) : weight * weight / weight_sq;
  std::tie(out.low, out.high) = wilson(p, n_eff, q);
  out.spread = std::max(out.high - p, p - out.low) * std::sqrt(kd) / q;
  return out;
}

double items_to_decide(double estimate, double spread, double margin, double quantile) {
  if (!std::isfinite(spread) || !std::isfinite(estimate)) return kNaN;
  const double gap = margin - estimate;
  if (gap == 0) return kInf;
  return (quantile * spread / gap) * (quantile * spread / gap);
}

double items_to_decide_t(double estimate, double spread, double margin, double confidence) {
  check_confidence(confidence);
  const double p = 0.5 + confidence / 2;
  const double large = items_to_decide(estimate, spread, margin, normal_quantile(p));
  if (!std::isfinite(large)) return large;
  // n - (t(n-1) × spread / gap)² grows with n, and t > z, so the answer is at least the normal one.
  auto enough = [&](int64_t n) { return static_cast<double>(n) >= items_to_decide(estimate, spread, margin, student_t_quantile(p, n - 1)); };
  int64_t lo = std::max<int64_t>(2, static_cast<int64_t>(std::ceil(large))), hi = lo;
  while (!enough(hi)) {
    if (hi > (int64_t{1} << 40)) return kInf;
    lo = hi + 1;
    hi *= 2;
  }
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (enough(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  return static_cast<double>(hi);
}

}  // namespace kvgate::scoring
