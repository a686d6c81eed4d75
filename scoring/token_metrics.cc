#include "scoring/token_metrics.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace kvgate::scoring {

void log_softmax(std::span<const float> logits, std::span<double> out) {
  if (logits.empty()) throw_input_error("log_softmax: empty logit vector");
  if (out.size() != logits.size()) throw_internal_error("log_softmax: output size differs from input size");
  double max_logit = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    const double v = logits[i];
    if (std::isnan(v) || v == std::numeric_limits<double>::infinity())
      throw_input_error("logits: non-finite value " + std::to_string(v) + " at index " + std::to_string(i));
    if (v > max_logit) max_logit = v;
  }
  if (max_logit == -std::numeric_limits<double>::infinity())
    throw_input_error("logits: every entry is -inf, no distribution is defined");
  double sum_exp = 0.0;
  for (float v : logits) sum_exp += std::exp(static_cast<double>(v) - max_logit);
  const double log_norm = max_logit + std::log(sum_exp);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - log_norm;
}

namespace {

uint32_t argmax_first(std::span<const double> values) {
  size_t best = 0;
  for (size_t i = 1; i < values.size(); ++i)
    if (values[i] > values[best]) best = i;
  return static_cast<uint32_t>(best);
}

}  // namespace

PositionComparison compare_position(std::span<const float> ref_logits, std::span<const float> q_logits,
                                    uint32_t correct_token) {
  if (ref_logits.size() != q_logits.size())
    throw_input_error("compare_position: reference has " + std::to_string(ref_logits.size()) +
                      " logits but quantized config has " + std::to_string(q_logits.size()));
  if (correct_token >= ref_logits.size())
    throw_input_error("compare_position: correct token " + std::to_string(correct_token) +
                      " is outside the vocabulary of " + std::to_string(ref_logits.size()));
  std::vector<double> log_ref(ref_logits.size()), log_q(q_logits.size());
  log_softmax(ref_logits, log_ref);
  log_softmax(q_logits, log_q);

  PositionComparison c;
  double kld = 0.0;
  for (size_t i = 0; i < log_ref.size(); ++i) {
    // A token the reference never produces contributes nothing, even where q is also -inf.
    if (log_ref[i] == -std::numeric_limits<double>::infinity()) continue;
    kld += std::exp(log_ref[i]) * (log_ref[i] - log_q[i]);
  }
  c.kld = kld;
  c.nll_ref = -log_ref[correct_token];
  c.nll_q = -log_q[correct_token];
  c.p_ref = std::exp(log_ref[correct_token]);
  c.p_q = std::exp(log_q[correct_token]);
  c.delta_p = c.p_q - c.p_ref;
  c.top1_ref = argmax_first(log_ref);
  c.top1_q = argmax_first(log_q);
  c.same_top1 = c.top1_ref == c.top1_q;
  return c;
}

}  // namespace kvgate::scoring
