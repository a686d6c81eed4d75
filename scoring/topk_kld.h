#pragma once
// KL divergence and Δp of the correct token when only the top-k logprobs of each distribution
// are known, as a serving engine reports them (k <= 20 with vLLM's defaults and OpenAI's API).
//
// Estimator. Let R and Q be the reference's and the candidate's top-k lists and S the tokens
// listed in both. Each side's vocabulary is cut into the same buckets: one per token of S, plus
// one "rest" bucket holding everything else — the mass outside its own top k, and the mass of
// the tokens it lists that the other side does not (their probability on the other side is
// unknown, so they cannot stand alone). With P_rest = 1 − Σ_S p and Q_rest = 1 − Σ_S q:
//
//     KLD_topk = Σ_{i∈S} p_i ln(p_i / q_i) + P_rest ln(P_rest / Q_rest)
//
// This is the exact KL divergence of the two distributions coarse-grained onto that partition.
// Bias: by the data-processing inequality it never exceeds the full KL, and it falls short by
// exactly P_rest · KL(P|rest ‖ Q|rest), the divergence inside the rest bucket (P|rest, Q|rest:
// each distribution renormalized over the rest). It is 0 for identical lists, and 0 — no
// evidence of change, not evidence of none — when the lists share no token. The shortfall
// grows with the rest mass, i.e. with the entropy of the distribution beyond k tokens;
// docs/engine-mode.md records how large it is on the default model (k = 20).
//
// A companion, KLD_scaled = KLD_topk / (1 − P_rest), assumes the divergence per unit of
// reference mass is the same inside the rest bucket as outside it. It is no longer a bound
// (it may land on either side of the full KL at one position) but its mean is much closer:
// see docs/engine-mode.md for both estimators' measured error.
//
// Δp. p of the correct token is exact when it is listed or the engine reports it separately
// (vLLM prompt_logprobs, SGLang input_token_logprobs). Otherwise it is only bounded:
// 0 <= p <= min(smallest listed p, P_tail), P_tail = 1 − Σ_R p; the midpoint is used and the
// half-width is reported, so an aggregate can say how much of a Δp is uncertainty.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "scoring/token_metrics.h"

namespace kvgate::scoring {

struct TopLogprob {
  int32_t token = 0;
  double logprob = 0.0;  // natural log, normalized over the full vocabulary
};

struct TopKDistribution {
  std::span<const TopLogprob> top;        // any order; distinct tokens; non-empty
  std::optional<double> target_logprob;  // the correct token's logprob, when reported apart
};

struct TopKComparison {
  // kld = KLD_topk; p_ref/p_q (and the NLLs and delta_p) exact or bounded midpoints; top-1 of
  // each list is exact (the argmax is always listed). Feeds the same aggregates as in-process
  // PositionComparisons.
  PositionComparison position;
  double kld_scaled = 0.0;      // KLD_topk / (1 − P_rest); KLD_topk when P_rest is (almost) 1
  size_t shared = 0;            // |S|
  double ref_rest_mass = 0.0;   // P_rest
  double q_rest_mass = 0.0;     // Q_rest
  bool p_ref_exact = true;
  bool p_q_exact = true;
  double delta_p_halfwidth = 0.0;  // Δp lies within ± this of position.delta_p
};

// Throws kvgate::Error (input) on an empty list, a repeated token, a NaN or positive logprob
// (beyond float rounding), a list whose probabilities sum past 1 (beyond rounding), or a
// target logprob that disagrees with the list's entry for the target.
TopKComparison compare_topk(const TopKDistribution& ref, const TopKDistribution& q, int32_t correct_token);

// The k most likely tokens of a full log-probability vector, best first (ties: lower token id
// first), for the in-process cross-check of an engine's lists.
std::vector<TopLogprob> top_k_of(std::span<const double> logprobs, size_t k);

}  // namespace kvgate::scoring
