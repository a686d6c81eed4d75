#include "scoring/token_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace kvgate::scoring {
namespace {

TEST(LogSoftmax, MatchesHandComputedValues) {
  // ln softmax(1, 2, 3): log-normalizer 3 + ln(1 + e^-1 + e^-2) = 3.40760596444438.
  const std::vector<float> logits = {1, 2, 3};
  std::vector<double> out(3);
  log_softmax(logits, out);
  EXPECT_NEAR(out[0], -2.4076059644443806, 1e-14);
  EXPECT_NEAR(out[1], -1.4076059644443806, 1e-14);
  EXPECT_NEAR(out[2], -0.4076059644443806, 1e-14);
}

TEST(LogSoftmax, HugeLogitsStayFinite) {
  const std::vector<float> logits = {1000.0f, 0.0f, -1000.0f};
  std::vector<double> out(3);
  log_softmax(logits, out);
  EXPECT_EQ(out[0], 0.0);  // e^-1000 vanishes in double: the top token has probability 1
  EXPECT_EQ(out[1], -1000.0);
  EXPECT_EQ(out[2], -2000.0);
}

TEST(LogSoftmax, RejectsNanPositiveInfinityAndAllMasked) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<double> out(2);
  EXPECT_THROW(log_softmax(std::vector<float>{0.0f, std::nanf("")}, out), Error);
  EXPECT_THROW(log_softmax(std::vector<float>{0.0f, inf}, out), Error);
  EXPECT_THROW(log_softmax(std::vector<float>{-inf, -inf}, out), Error);
  std::vector<double> none;
  EXPECT_THROW(log_softmax(std::vector<float>{}, none), Error);
}

TEST(ComparePosition, TwoTokenExample) {
  // ref = (1/2, 1/2); q = (3/4, 1/4) from logits (ln 3, 0).
  // KL(ref || q) = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3).
  const std::vector<float> ref = {0.0f, 0.0f};
  const std::vector<float> q = {static_cast<float>(std::log(3.0)), 0.0f};
  const PositionComparison c = compare_position(ref, q, 0);
  // q's logit is ln 3 rounded to float; 1e-7 covers that rounding.
  EXPECT_NEAR(c.kld, 0.14384103622589042, 1e-7);
  EXPECT_NEAR(c.p_ref, 0.5, 1e-15);
  EXPECT_NEAR(c.p_q, 0.75, 1e-7);
  EXPECT_NEAR(c.delta_p, 0.25, 1e-7);
  EXPECT_NEAR(c.nll_ref, 0.6931471805599453, 1e-15);
  EXPECT_NEAR(c.nll_q, 0.2876820724517809, 1e-7);
  EXPECT_EQ(c.top1_ref, 0u);  // a tie goes to the lowest index
  EXPECT_EQ(c.top1_q, 0u);
  EXPECT_TRUE(c.same_top1);

  const PositionComparison other = compare_position(ref, q, 1);
  EXPECT_NEAR(other.delta_p, -0.25, 1e-7);
  EXPECT_EQ(other.kld, c.kld);  // KL does not depend on the correct token
}

TEST(ComparePosition, IdenticalDistributionsGiveExactlyZero) {
  const std::vector<float> logits = {0.3f, -1.7f, 2.9f, 0.0f, 5.5f};
  const PositionComparison c = compare_position(logits, logits, 2);
  EXPECT_EQ(c.kld, 0.0);
  EXPECT_EQ(c.delta_p, 0.0);
  EXPECT_EQ(c.nll_q, c.nll_ref);
  EXPECT_EQ(c.top1_ref, 4u);
  EXPECT_TRUE(c.same_top1);
}

TEST(ComparePosition, ShiftedLogitsAreTheSameDistribution) {
  // Log-probabilities are logits too: shifting every logit must not change anything.
  const std::vector<float> ref = {1.0f, 2.0f, 3.0f};
  const std::vector<float> shifted = {-9.0f, -8.0f, -7.0f};
  const PositionComparison c = compare_position(ref, shifted, 1);
  EXPECT_NEAR(c.kld, 0.0, 1e-15);
  EXPECT_NEAR(c.delta_p, 0.0, 1e-15);
}

TEST(ComparePosition, DisagreeingTop1AndLargeKl) {
  // ref puts (almost) all mass on token 0, q on token 1: KL ≈ 1000 nats, stably.
  const std::vector<float> ref = {1000.0f, 0.0f};
  const std::vector<float> q = {0.0f, 1000.0f};
  const PositionComparison c = compare_position(ref, q, 0);
  EXPECT_NEAR(c.kld, 1000.0, 1e-9);
  EXPECT_FALSE(c.same_top1);
  EXPECT_EQ(c.top1_ref, 0u);
  EXPECT_EQ(c.top1_q, 1u);
  EXPECT_NEAR(c.delta_p, -1.0, 1e-12);
}

TEST(ComparePosition, MaskedTokensContributeNothing) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> ref = {0.0f, 0.0f, -inf};
  const std::vector<float> q = {0.0f, 0.0f, -inf};
  EXPECT_EQ(compare_position(ref, q, 0).kld, 0.0);
  // q masking a token that ref can produce is an infinite divergence.
  const std::vector<float> q_masks = {0.0f, -inf, 0.0f};
  EXPECT_TRUE(std::isinf(compare_position(ref, q_masks, 0).kld));
}

TEST(ComparePosition, RejectsMismatchedVocabularyAndBadToken) {
  const std::vector<float> a = {0.0f, 1.0f}, b = {0.0f, 1.0f, 2.0f};
  EXPECT_THROW(compare_position(a, b, 0), Error);
  EXPECT_THROW(compare_position(a, a, 2), Error);
  try {
    compare_position(a, a, 7);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
  }
}

}  // namespace
}  // namespace kvgate::scoring
