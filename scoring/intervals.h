#pragma once
// Confidence intervals for "is config B no worse than the reference by more than a margin"
// (docs/gates.md, "Rollout verdicts"): the bound of a paired harm compared with a stated margin,
// a non-inferiority test. Pure functions on counts and per-item sums.
//
// Three shapes of data, one method each:
//   paired binary      one yes/no per item under both configs (gold exact match): Tango's score
//                      interval for the difference of paired proportions. Unlike a bootstrap or
//                      a Wald interval it does not collapse to [0, 0] when no pair disagrees
//                      (25 identical answers rule out a drop of at most 13 points, not 0).
//   clustered ratio    a token- or turn-weighted rate or mean, Σ sum_i / Σ weight_i over items
//                      (same top-1, first-token differs, mean KLD): the tokens and turns of one
//                      item (one multi-turn session) are not independent, so the item is the
//                      unit. The ratio's variance is the cluster-robust (linearized) one over
//                      items, the quantile Student's t with items − 1 degrees of freedom.
//                      Rates: a Wilson interval at the effective number of observations that
//                      variance implies (Korn & Graubard's design-effect adjustment); with no
//                      event at all the within-item correlation cannot be estimated, so every
//                      item counts as one observation (Kish's effective count). Means: t
//                      interval, clamped at 0 below (KLD is never negative).
// Every interval also gives the per-item spread it implies (`spread`: standard error × √items),
// from which items_to_decide() estimates how many items would move its bound to a margin.
#include <cstddef>
#include <cstdint>
#include <span>

namespace kvgate::scoring {

// Standard normal quantile Φ⁻¹(p), p in (0, 1); by bisection on std::erfc, to ~1e-13.
double normal_quantile(double p);
// Student's t quantile with `df` >= 1 degrees of freedom, p in (0, 1); the CDF in closed form
// for whole df (Abramowitz & Stegun 26.7.3-4), inverted by bisection.
double student_t_quantile(double p, int64_t df);

struct Interval {
  double estimate = 0, low = 0, high = 0;
  size_t units = 0;    // items (clusters, or pairs) the interval rests on
  double spread = 0;   // per-item spread: (bound − estimate) × √units / quantile; NaN when unknown (one item)
};

// Paired yes/no per item: `discordant_ref` items right under the reference and wrong under the
// candidate, `discordant_cand` the reverse, `pairs` all paired items. The interval is on the
// difference reference − candidate (a drop is positive), at two-sided `confidence`.
Interval paired_difference_interval(int64_t discordant_ref, int64_t discordant_cand, int64_t pairs, double confidence);

// One item's share of a ratio: the sum of its values (tokens agreeing, turns differing, KLD
// summed over its tokens) and their count.
struct ItemRatio {
  double sum = 0, weight = 0;
};
enum class RatioKind { rate, mean };
// Σ sum / Σ weight over the items with weight > 0, at two-sided `confidence`. No item: units 0
// and NaN everywhere; one item: the whole range ([0, 1] for a rate, [0, ∞) for a mean).
Interval clustered_ratio_interval(std::span<const ItemRatio> items, RatioKind kind, double confidence);

// Items that would bring the bound of an interval with this estimate and per-item spread to
// `margin` at `quantile` (the large-sample normal one): (quantile × spread / (margin −
// estimate))². Infinite when the estimate sits on the margin, NaN when the spread is unknown.
double items_to_decide(double estimate, double spread, double margin, double quantile);
// The same for the clustered intervals, whose quantile is Student's t at items − 1 degrees of
// freedom at two-sided `confidence`: the smallest whole item count n with n >= (t(n − 1) ×
// spread / (margin − estimate))², so that a few items are not promised what only many give.
double items_to_decide_t(double estimate, double spread, double margin, double confidence);

}  // namespace kvgate::scoring
