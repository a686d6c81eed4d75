#include "scoring/topk_kld.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/error.h"

namespace kvgate::scoring {

namespace {

// Engines compute these in float32: a logprob may come out a hair above 0 and a list's
// probabilities may sum a hair above 1. Beyond these the input is wrong, not rounded.
constexpr double kLogprobSlack = 1e-4;
constexpr double kMassSlack = 1e-3;
// A rest mass below this cannot be told from 0 in float32 sums of up to 20 terms: two such
// rests add nothing, and the candidate's is floored here before the ratio; otherwise a rest of
// 1e-3 against a rounded 1e-12 would read as a large divergence. Either way the term only
// shrinks or changes by at most kRestFloor / e, so the estimate stays a lower bound to that.
constexpr double kRestFloor = 1e-6;
// The probability used for a correct token that is provably (almost) never produced, so NLL
// stays finite.
constexpr double kMinProbability = 1e-12;

struct SortedList {
  std::vector<TopLogprob> by_token;
  double mass = 0.0;       // Σ p over the list
  double min_prob = 1.0;   // smallest listed p
  int32_t top1 = 0;
};

SortedList prepare(const TopKDistribution& d, const char* side) {
  if (d.top.empty()) throw_input_error(std::string("top-k comparison: the ") + side + " list is empty");
  SortedList s;
  s.by_token.assign(d.top.begin(), d.top.end());
  std::sort(s.by_token.begin(), s.by_token.end(), [](const TopLogprob& a, const TopLogprob& b) { return a.token < b.token; });
  double best = -INFINITY;
  for (size_t i = 0; i < s.by_token.size(); ++i) {
    const TopLogprob& e = s.by_token[i];
    if (i > 0 && s.by_token[i - 1].token == e.token)
      throw_input_error(std::string("top-k comparison: the ") + side + " list names token " + std::to_string(e.token) + " twice");
    if (std::isnan(e.logprob) || e.logprob > kLogprobSlack)
      throw_input_error(std::string("top-k comparison: the ") + side + " list has logprob " + std::to_string(e.logprob) +
                        " for token " + std::to_string(e.token));
    const double p = std::exp(std::min(0.0, e.logprob));
    s.mass += p;
    s.min_prob = std::min(s.min_prob, p);
    if (e.logprob > best) {  // ascending token order: the first of equal maxima is the lowest id
      best = e.logprob;
      s.top1 = e.token;
    }
  }
  if (s.mass > 1.0 + kMassSlack)
    throw_input_error(std::string("top-k comparison: the ") + side + " list's probabilities sum to " + std::to_string(s.mass) +
                      ", more than 1");
  return s;
}

const TopLogprob* find(const SortedList& s, int32_t token) {
  auto it = std::lower_bound(s.by_token.begin(), s.by_token.end(), token,
                             [](const TopLogprob& e, int32_t t) { return e.token < t; });
  return it != s.by_token.end() && it->token == token ? &*it : nullptr;
}

struct TargetProbability {
  double p = 0.0;
  double halfwidth = 0.0;
  bool exact = true;
};

TargetProbability target_probability(const TopKDistribution& d, const SortedList& s, int32_t target, const char* side) {
  const TopLogprob* listed = find(s, target);
  if (d.target_logprob) {
    const double lp = *d.target_logprob;
    if (std::isnan(lp) || lp > kLogprobSlack)
      throw_input_error(std::string("top-k comparison: the ") + side + " target logprob is " + std::to_string(lp));
    if (listed != nullptr && std::fabs(listed->logprob - lp) > 1e-3)
      throw_input_error(std::string("top-k comparison: the ") + side + " target logprob " + std::to_string(lp) +
                        " disagrees with its list entry " + std::to_string(listed->logprob));
    return {std::exp(std::min(0.0, lp)), 0.0, true};
  }
  if (listed != nullptr) return {std::exp(std::min(0.0, listed->logprob)), 0.0, true};
  const double bound = std::min(s.min_prob, std::max(0.0, 1.0 - s.mass));
  return {bound / 2, bound / 2, false};
}

}  // namespace

TopKComparison compare_topk(const TopKDistribution& ref, const TopKDistribution& q, int32_t correct_token) {
  const SortedList r = prepare(ref, "reference");
  const SortedList c = prepare(q, "candidate");

  TopKComparison out;
  double kld = 0.0, p_shared = 0.0, q_shared = 0.0;
  size_t i = 0, j = 0;
  while (i < r.by_token.size() && j < c.by_token.size()) {
    const TopLogprob& a = r.by_token[i];
    const TopLogprob& b = c.by_token[j];
    if (a.token < b.token) {
      ++i;
    } else if (b.token < a.token) {
      ++j;
    } else {
      const double p = std::exp(std::min(0.0, a.logprob));
      // A token the reference never produces adds nothing (and -inf - -inf must not make NaN).
      // Formed from the logprobs themselves, so identical lists cancel to exactly 0.
      if (p > 0.0) kld += p * (std::min(0.0, a.logprob) - std::min(0.0, b.logprob));
      p_shared += p;
      q_shared += std::exp(std::min(0.0, b.logprob));
      ++out.shared;
      ++i;
      ++j;
    }
  }
  const double p_rest = std::max(0.0, 1.0 - p_shared);
  const double q_rest = std::max(0.0, 1.0 - q_shared);
  if (p_rest > kRestFloor || q_rest > kRestFloor)
    kld += p_rest > 0.0 ? p_rest * (std::log(p_rest) - std::log(std::max(q_rest, kRestFloor))) : 0.0;
  // With (almost) nothing shared there is nothing to scale: the estimate stays what it is.
  out.kld_scaled = p_rest < 1.0 - kRestFloor ? kld / (1.0 - p_rest) : kld;
  out.ref_rest_mass = p_rest;
  out.q_rest_mass = q_rest;

  const TargetProbability pr = target_probability(ref, r, correct_token, "reference");
  const TargetProbability pq = target_probability(q, c, correct_token, "candidate");
  PositionComparison& pos = out.position;
  pos.kld = kld;
  pos.p_ref = pr.p;
  pos.p_q = pq.p;
  pos.delta_p = pq.p - pr.p;
  pos.nll_ref = -std::log(std::max(pr.p, kMinProbability));
  pos.nll_q = -std::log(std::max(pq.p, kMinProbability));
  pos.top1_ref = static_cast<uint32_t>(r.top1);
  pos.top1_q = static_cast<uint32_t>(c.top1);
  pos.same_top1 = r.top1 == c.top1;
  out.p_ref_exact = pr.exact;
  out.p_q_exact = pq.exact;
  out.delta_p_halfwidth = pr.halfwidth + pq.halfwidth;
  return out;
}

std::vector<TopLogprob> top_k_of(std::span<const double> logprobs, size_t k) {
  std::vector<int32_t> ids(logprobs.size());
  std::iota(ids.begin(), ids.end(), 0);
  k = std::min(k, ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<long>(k), ids.end(), [&](int32_t a, int32_t b) {
    return logprobs[a] > logprobs[b] || (logprobs[a] == logprobs[b] && a < b);
  });
  std::vector<TopLogprob> out(k);
  for (size_t i = 0; i < k; ++i) out[i] = {ids[i], logprobs[ids[i]]};
  return out;
}

}  // namespace kvgate::scoring
