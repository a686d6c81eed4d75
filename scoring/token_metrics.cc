#include "scoring/token_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace kvgate::scoring {

namespace {

struct Normalizer {
  double sum_shifted_exp;  // Σ exp(x_i − max)
  double log_norm;         // ln Σ exp(x_i) = max + ln(sum_shifted_exp)
};

// Validates the logits and computes the softmax normalizer; if `shifted_exp` is non-empty it
// receives exp(x_i − max), the unnormalized probabilities, so callers need no second exp.
Normalizer normalize(std::span<const float> logits, std::span<double> shifted_exp) {
  if (logits.empty()) throw_input_error("logits: empty vector");
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
  for (size_t i = 0; i < logits.size(); ++i) {
    const double e = std::exp(static_cast<double>(logits[i]) - max_logit);
    if (!shifted_exp.empty()) shifted_exp[i] = e;
    sum_exp += e;
  }
  return {sum_exp, max_logit + std::log(sum_exp)};
}

uint32_t argmax_first(std::span<const float> values) {
  size_t best = 0;
  for (size_t i = 1; i < values.size(); ++i)
    if (values[i] > values[best]) best = i;
  return static_cast<uint32_t>(best);
}

}  // namespace

void log_softmax(std::span<const float> logits, std::span<double> out) {
  if (out.size() != logits.size()) throw_internal_error("log_softmax: output size differs from input size");
  const double log_norm = normalize(logits, {}).log_norm;
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - log_norm;
}

namespace {

// llama.cpp drops reference entries at or below this log-probability from the KL sum.
constexpr double kLlamaCppMinLogProb = -16.0;

// The reference's log-probabilities as llama-perplexity --kl-divergence-base stores them and
// --kl-divergence reads them back: float arithmetic in llama.cpp's order, logits more than 16
// below the largest clamped to the floor, the rest rounded to 65536 steps between the floor
// and the maximum (round half to even, as its nearest_int).
std::vector<double> llama_cpp_stored_log_probs(std::span<const float> logits) {
  float max_logit = logits[0];
  float min_logit = logits[0];
  for (const float v : logits) {
    max_logit = std::max(max_logit, v);
    min_logit = std::min(min_logit, v);
  }
  min_logit = std::max(min_logit, max_logit - 16.0f);
  double sum_exp = 0.0;
  for (const float v : logits) sum_exp += std::exp(v - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  const float scale = (max_logit - min_logit) / 65535.0f;
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    float steps = 0.0f;
    if (scale != 0.0f && logits[i] > min_logit) steps = std::nearbyint((1.0f / scale) * (logits[i] - min_logit));
    out[i] = scale * steps + min_log_prob;
  }
  return out;
}

}  // namespace

PositionComparison compare_position(std::span<const float> ref_logits, std::span<const float> q_logits,
                                    uint32_t correct_token) {
  return compare_position(ref_logits, q_logits, correct_token, KldDefinition::kFull);
}

PositionComparison compare_position(std::span<const float> ref_logits, std::span<const float> q_logits,
                                    uint32_t correct_token, KldDefinition definition) {
  if (ref_logits.size() != q_logits.size())
    throw_input_error("compare_position: reference has " + std::to_string(ref_logits.size()) +
                      " logits but quantized config has " + std::to_string(q_logits.size()));
  if (correct_token >= ref_logits.size())
    throw_input_error("compare_position: correct token " + std::to_string(correct_token) +
                      " is outside the vocabulary of " + std::to_string(ref_logits.size()));
  std::vector<double> ref_exp(ref_logits.size());
  const Normalizer ref = normalize(ref_logits, ref_exp);
  const double log_norm_ref = ref.log_norm;
  const double log_norm_q = normalize(q_logits, {}).log_norm;

  PositionComparison c;
  c.nll_ref = log_norm_ref - static_cast<double>(ref_logits[correct_token]);
  c.nll_q = log_norm_q - static_cast<double>(q_logits[correct_token]);
  c.top1_ref = argmax_first(ref_logits);
  c.top1_q = argmax_first(q_logits);
  double kld = 0.0;
  if (definition == KldDefinition::kLlamaCppStored) {
    // Everything about the reference comes from what llama.cpp's base file keeps of it.
    const std::vector<double> log_ref = llama_cpp_stored_log_probs(ref_logits);
    c.nll_ref = -log_ref[correct_token];
    size_t best = 0;
    for (size_t i = 0; i < log_ref.size(); ++i) {
      if (log_ref[i] > log_ref[best]) best = i;
      if (log_ref[i] <= kLlamaCppMinLogProb) continue;
      const double log_q = static_cast<double>(q_logits[i]) - log_norm_q;
      kld += std::exp(log_ref[i]) * (log_ref[i] - log_q);
    }
    c.top1_ref = static_cast<uint32_t>(best);
  } else {
    // KL(ref || q) = Σ p_ref (ln p_ref − ln q), each log-probability formed as logit − log
    // normalizer, so identical inputs cancel term by term to exactly 0.
    const bool llama_cpp_terms = definition == KldDefinition::kLlamaCpp;
    for (size_t i = 0; i < ref_logits.size(); ++i) {
      if (ref_exp[i] == 0.0) continue;  // the reference never produces this token
      const double log_ref = static_cast<double>(ref_logits[i]) - log_norm_ref;
      if (llama_cpp_terms && log_ref <= kLlamaCppMinLogProb) continue;
      const double log_q = static_cast<double>(q_logits[i]) - log_norm_q;
      kld += ref_exp[i] / ref.sum_shifted_exp * (log_ref - log_q);
    }
  }
  c.kld = kld;
  c.p_ref = std::exp(-c.nll_ref);
  c.p_q = std::exp(-c.nll_q);
  c.delta_p = c.p_q - c.p_ref;
  c.same_top1 = c.top1_ref == c.top1_q;
  return c;
}

}  // namespace kvgate::scoring
