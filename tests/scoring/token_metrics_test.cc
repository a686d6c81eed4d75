#include "scoring/token_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

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

// The runner names the model, config and item of a bad row; the scoring layer says which side.
TEST(ComparePosition, NonFiniteLogitsNameTheirSide) {
  const std::vector<float> ok = {0.0f, 1.0f}, nan = {0.0f, std::nanf("")};
  try {
    compare_position(nan, ok, 0);
    FAIL();
  } catch (const NonFiniteLogits& e) {
    EXPECT_EQ(e.side(), LogitSide::reference);
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_EQ(std::string(e.what()).rfind("reference logits: non-finite value nan at index 1", 0), 0u) << e.what();
  }
  try {
    compare_position(ok, nan, 0);
    FAIL();
  } catch (const NonFiniteLogits& e) {
    EXPECT_EQ(e.side(), LogitSide::candidate);
  }
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

std::vector<float> normal_logits(size_t n, uint64_t seed, double sigma) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(sigma * rng.normal());
  return v;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_identical(const PositionComparison& a, const PositionComparison& b, const std::string& what) {
  EXPECT_TRUE(same_bits(a.kld, b.kld)) << what << ": kld " << a.kld << " vs " << b.kld;
  EXPECT_TRUE(same_bits(a.p_ref, b.p_ref)) << what;
  EXPECT_TRUE(same_bits(a.p_q, b.p_q)) << what;
  EXPECT_TRUE(same_bits(a.delta_p, b.delta_p)) << what;
  EXPECT_TRUE(same_bits(a.nll_ref, b.nll_ref)) << what;
  EXPECT_TRUE(same_bits(a.nll_q, b.nll_q)) << what;
  EXPECT_EQ(a.top1_ref, b.top1_ref) << what;
  EXPECT_EQ(a.top1_q, b.top1_q) << what;
}

// The vectorized path (AVX-512 or AVX2, whichever this CPU has) and the portable one perform the
// same operations in the same order: every field agrees bit for bit, so results do not depend
// on the machine. Covers tails (sizes not a multiple of 8), ties for the maximum, and the masked
// variant (-inf entries, entries beyond the exp floor).
TEST(ComparePosition, VectorAndPortablePathsAgreeBitForBit) {
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t n : {1u, 7u, 8u, 9u, 31u, 1001u, 49152u}) {
    const std::vector<float> ref = normal_logits(n, 1 + n, 3.0);
    std::vector<float> q = ref;
    Rng rng(n);
    for (float& x : q) x += static_cast<float>(0.05 * rng.normal());
    std::vector<float> far = q, masked = q, tied = ref;
    for (size_t i = 0; i < n; i += 5) far[i] -= 900.0f;  // beyond the floor: the masked variant
    for (size_t i = 1; i < n; i += 7) masked[i] = -inf;
    if (n > 3) tied[n - 1] = tied[2] = 50.0f;  // two maxima: the lower index wins
    const uint32_t target = static_cast<uint32_t>(n / 2);
    for (const auto& [name, other] : {std::pair<std::string, const std::vector<float>*>{"close", &q},
                                      {"far", &far}, {"masked", &masked}, {"tied", &tied}, {"same", &ref}}) {
      if (n == 1 && name == "masked") continue;  // a row of one -inf has no distribution
      const std::string what = name + " n=" + std::to_string(n);
      expect_identical(compare_position(ref, *other, target), compare_position_portable(ref, *other, target), what);
      expect_identical(compare_position(*other, ref, target), compare_position_portable(*other, ref, target),
                       what + " swapped");
      for (const KldDefinition d : {KldDefinition::kLlamaCpp, KldDefinition::kLlamaCppStored})
        expect_identical(compare_position(ref, *other, target, d), compare_position_portable(ref, *other, target, d),
                         what + " definition " + std::to_string(static_cast<int>(d)));
    }
  }
}

// Against the definition evaluated in long double with std::exp. KL of close distributions is a
// difference of O(1) sums in either form (the old per-term one too), so its error is absolute,
// a few 1e-16; the normalizers are good to a few ulp.
TEST(ComparePosition, AgreesWithLongDoubleDefinition) {
  for (double noise : {0.0005, 0.05, 3.0}) {
    const std::vector<float> ref = normal_logits(49152, 7, 3.0);
    std::vector<float> q = ref;
    Rng rng(8);
    for (float& x : q) x += static_cast<float>(noise * rng.normal());
    long double mr = -INFINITY, mq = -INFINITY;
    for (size_t i = 0; i < ref.size(); ++i) mr = std::max<long double>(mr, ref[i]), mq = std::max<long double>(mq, q[i]);
    long double sr = 0, sq = 0;
    for (size_t i = 0; i < ref.size(); ++i) sr += std::exp(ref[i] - mr), sq += std::exp(q[i] - mq);
    const long double lr = mr + std::log(sr), lq = mq + std::log(sq);
    long double kl = 0;
    for (size_t i = 0; i < ref.size(); ++i) kl += std::exp(ref[i] - lr) * ((ref[i] - lr) - (q[i] - lq));
    // llama.cpp's terms: about 40 % of these entries have ln p_ref > -16.
    long double kl_llama = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      if (ref[i] - lr > -16) kl_llama += std::exp(ref[i] - lr) * ((ref[i] - lr) - (q[i] - lq));
    ASSERT_NE(kl_llama, kl);
    EXPECT_NEAR(compare_position(ref, q, 123, KldDefinition::kLlamaCpp).kld, static_cast<double>(kl_llama),
                1e-12 * std::fabs(static_cast<double>(kl_llama)) + 2e-15)
        << "noise " << noise;
    const PositionComparison c = compare_position(ref, q, 123);
    EXPECT_NEAR(c.kld, static_cast<double>(kl), 1e-12 * static_cast<double>(kl) + 2e-15) << "noise " << noise;
    EXPECT_NEAR(c.nll_ref, static_cast<double>(lr - ref[123]), 1e-13);
    EXPECT_NEAR(c.nll_q, static_cast<double>(lq - q[123]), 1e-13);
  }
}

TEST(ComparePositionDefinitions, FullIsComparePosition) {
  const std::vector<float> ref = {0.3f, -1.7f, 2.9f, -25.0f}, q = {0.1f, -1.0f, 3.0f, 0.0f};
  const PositionComparison a = compare_position(ref, q, 1), b = compare_position(ref, q, 1, KldDefinition::kFull);
  EXPECT_EQ(a.kld, b.kld);
  EXPECT_EQ(a.nll_ref, b.nll_ref);
  EXPECT_EQ(a.top1_ref, b.top1_ref);
}

TEST(ComparePositionDefinitions, LlamaCppDropsReferenceEntriesBelowMinus16) {
  // ref: ln p = (-ln(1 + e^-20), -20 - ln(1 + e^-20)); q uniform over two tokens. The second
  // entry lies below -16, so llama.cpp's sum loses exactly its term p1 (ln p1 + ln 2).
  const std::vector<float> ref = {0.0f, -20.0f}, q = {0.0f, 0.0f};
  const double log_p1 = -20.0 - std::log1p(std::exp(-20.0));
  const double dropped = std::exp(log_p1) * (log_p1 + std::log(2.0));
  const PositionComparison full = compare_position(ref, q, 0, KldDefinition::kFull);
  const PositionComparison llama = compare_position(ref, q, 0, KldDefinition::kLlamaCpp);
  EXPECT_LT(dropped, -3e-8);  // large enough to see in double
  EXPECT_NEAR(llama.kld - full.kld, -dropped, 1e-15);
  EXPECT_EQ(llama.nll_ref, full.nll_ref);  // everything but the KL sum is unchanged
  EXPECT_EQ(llama.p_ref, full.p_ref);

  // An entry just above the threshold still counts.
  const std::vector<float> ref_kept = {0.0f, -15.0f};
  EXPECT_NEAR(compare_position(ref_kept, q, 0, KldDefinition::kLlamaCpp).kld,
              compare_position(ref_kept, q, 0, KldDefinition::kFull).kld, 1e-15);
}

TEST(ComparePositionDefinitions, StoredReferenceIsRoundedTo16BitsAndClamped) {
  // Largest logit 0: the floor is -16, steps are 16/65535 nats. -20 is clamped (stored as the
  // floor, outside the KL sum), -1 is rounded to the nearest step, 1e-5 and 0 share the top
  // step, so the stored argmax is the first of them (index 1), not index 2.
  const std::vector<float> ref = {-20.0f, 0.0f, 1e-5f, -1.0f};
  const std::vector<float> q = {-20.0f, 0.0f, 1.0f, -1.0f};
  const PositionComparison exact = compare_position(ref, q, 3, KldDefinition::kLlamaCpp);
  const PositionComparison stored = compare_position(ref, q, 3, KldDefinition::kLlamaCppStored);
  EXPECT_EQ(exact.top1_ref, 2u);
  EXPECT_TRUE(exact.same_top1);
  EXPECT_EQ(stored.top1_ref, 1u);
  EXPECT_FALSE(stored.same_top1);
  const double step = 16.0 / 65535.0;
  EXPECT_NEAR(stored.nll_ref, exact.nll_ref, step);  // within one rounding step of the exact value
  EXPECT_NE(stored.nll_ref, exact.nll_ref);
  EXPECT_NEAR(stored.delta_p, stored.p_q - stored.p_ref, 1e-15);
  EXPECT_NEAR(stored.kld, exact.kld, 1e-3);
  EXPECT_NE(stored.kld, exact.kld);

  // The clamped entry reads back as the floor, 16 below the largest logit (1e-5) minus the
  // log-normalizer, so a clamped actual token gets an NLL 4 nats below its exact one.
  const double log_norm = std::log(1.0 + std::exp(1e-5) + std::exp(-1.0) + std::exp(-20.0));
  EXPECT_NEAR(compare_position(ref, q, 0, KldDefinition::kLlamaCpp).nll_ref, 20.0 + log_norm, 1e-6);
  EXPECT_NEAR(compare_position(ref, q, 0, KldDefinition::kLlamaCppStored).nll_ref, 16.0 - 1e-5 + log_norm, 5e-6);
}

TEST(ComparePositionDefinitions, IdenticalInputsStillGiveZero) {
  const std::vector<float> logits = {0.3f, -1.7f, 2.9f, 0.0f, -30.0f};
  EXPECT_EQ(compare_position(logits, logits, 2, KldDefinition::kLlamaCpp).kld, 0.0);
  EXPECT_TRUE(compare_position(logits, logits, 2, KldDefinition::kLlamaCppStored).same_top1);
}

}  // namespace
}  // namespace kvgate::scoring
