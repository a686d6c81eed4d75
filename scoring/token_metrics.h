#pragma once
// Per-position comparison of two next-token distributions (reference config vs quantized
// config) for the same context. Everything is computed in double from the raw logits so the
// comparison does not inherit the float rounding of the model under test, in one vectorized
// pass whose order of operations is fixed, so results are bit-identical between runs, thread
// counts and machines (with or without AVX2).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/error.h"

namespace kvgate::scoring {

enum class LogitSide { reference, candidate };

// compare_position's error for a logit row holding a NaN or +inf entry, or only -inf entries
// (an input error: the model file under test produced it). Typed so that the caller, which
// knows the model, config and item behind each side, can name them.
class NonFiniteLogits : public Error {
 public:
  NonFiniteLogits(LogitSide side, const std::string& message) : Error(ErrorKind::input, message), side_(side) {}
  LogitSide side() const { return side_; }

 private:
  LogitSide side_;
};

// What one scored position contributes to every aggregate (see kld_report.h).
struct PositionComparison {
  double kld = 0.0;       // KL(ref || q) in nats
  double p_ref = 0.0;     // probability of the correct token under the reference
  double p_q = 0.0;       // ... and under the quantized config
  double delta_p = 0.0;   // p_q - p_ref
  double nll_ref = 0.0;   // -ln p_ref, kept in log space so tiny probabilities stay exact
  double nll_q = 0.0;     // -ln p_q
  uint32_t top1_ref = 0;  // argmax of the reference (lowest index wins a tie)
  uint32_t top1_q = 0;
  bool same_top1 = false;
};

// ln softmax(logits)[i] for every i, in double, stable (max subtracted before exp).
// Log-probabilities are valid logits too (log-softmax is shift invariant), so callers that
// already hold normalized log-probs pass them here unchanged.
// Throws kvgate::Error (input) on an empty vector, a NaN or a +inf entry; -inf entries are
// allowed (masked tokens) as long as one entry is finite.
void log_softmax(std::span<const float> logits, std::span<double> out);

// Compares the two distributions at one position. Both spans must have the same length
// (the vocabulary) and correct_token must index into them; otherwise kvgate::Error (input).
// A row that is not a distribution (NaN, +inf, all -inf) throws NonFiniteLogits naming its side.
// KL is not clamped at zero: for identical inputs it is exactly 0, and a tiny negative value
// can only come from rounding, which hiding would make harder to see.
PositionComparison compare_position(std::span<const float> ref_logits, std::span<const float> q_logits,
                                    uint32_t correct_token);

// Which terms of the reference distribution a KL sum keeps. llama-perplexity --kl-divergence
// (b11434, tools/perplexity/perplexity.cpp) stores the reference's log-probs in 16 bits per
// entry, clamped 16 nats below the largest logit, and sums p_ref (ln p_ref - ln q) only over
// entries with ln p_ref > -16; its NLL(base) and top-1 come from the stored values too.
enum class KldDefinition {
  kFull,           // every vocabulary entry, reference in double: compare_position above
  kLlamaCpp,       // only entries with ln p_ref > -16, reference in double
  kLlamaCppStored  // kLlamaCpp on the reference as llama.cpp's base file stores it (16 bits):
                   // p_ref, nll_ref, top1_ref and the KL terms all from the stored values
};

// compare_position with the KL sum, and for kLlamaCppStored the reference, as `definition`
// says. kFull gives exactly compare_position's result.
PositionComparison compare_position(std::span<const float> ref_logits, std::span<const float> q_logits,
                                    uint32_t correct_token, KldDefinition definition);

// compare_position on the portable path only (no SIMD), which performs the same floating-point
// operations in the same order: for tests that check the two agree bit for bit.
PositionComparison compare_position_portable(std::span<const float> ref_logits, std::span<const float> q_logits,
                                             uint32_t correct_token,
                                             KldDefinition definition = KldDefinition::kFull);

}  // namespace kvgate::scoring
