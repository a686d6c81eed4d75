#include "scoring/topk_kld.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace kvgate::scoring {
namespace {

std::vector<double> log_probs(const std::vector<float>& logits) {
  std::vector<double> out(logits.size());
  log_softmax(logits, out);
  return out;
}

std::vector<float> random_logits(Rng& rng, size_t vocab, double scale) {
  std::vector<float> l(vocab);
  for (auto& v : l) v = static_cast<float>(rng.normal() * scale);
  return l;
}

TEST(TopKKld, IdenticalListsAreExactlyZero) {
  const std::vector<TopLogprob> a = {{5, -0.2}, {9, -2.5}, {2, -3.0}};
  const TopKComparison c = compare_topk({a, std::nullopt}, {a, std::nullopt}, 9);
  EXPECT_EQ(c.position.kld, 0.0);
  EXPECT_EQ(c.position.delta_p, 0.0);
  EXPECT_TRUE(c.position.same_top1);
  EXPECT_EQ(c.position.top1_ref, 5u);
  EXPECT_EQ(c.shared, 3u);
  EXPECT_TRUE(c.p_ref_exact && c.p_q_exact);
  EXPECT_NEAR(c.position.p_ref, std::exp(-2.5), 1e-15);
}

TEST(TopKKld, WithTheWholeVocabularyItIsTheFullKld) {
  Rng rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<float> ref = random_logits(rng, 64, 2.0);
    std::vector<float> q = ref;
    for (auto& v : q) v += static_cast<float>(rng.normal() * 0.3);
    const std::vector<double> lr = log_probs(ref), lq = log_probs(q);
    const auto tr = top_k_of(lr, 64), tq = top_k_of(lq, 64);
    const uint32_t target = static_cast<uint32_t>(rng.below(64));
    const TopKComparison est = compare_topk({tr, std::nullopt}, {tq, std::nullopt}, static_cast<int32_t>(target));
    const PositionComparison full = compare_position(ref, q, target);
    EXPECT_NEAR(est.position.kld, full.kld, 1e-12);
    EXPECT_NEAR(est.position.delta_p, full.delta_p, 1e-12);
    EXPECT_NEAR(est.position.nll_q, full.nll_q, 1e-9);
    EXPECT_EQ(est.position.same_top1, full.same_top1);
  }
}

TEST(TopKKld, NeverExceedsTheFullKldAndTheGapIsTheRestBucketsDivergence) {
  Rng rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t vocab = 300, k = 1 + rng.below(20);
    const std::vector<float> ref = random_logits(rng, vocab, 1.0 + 3.0 * rng.uniform());
    std::vector<float> q = ref;
    for (auto& v : q) v += static_cast<float>(rng.normal() * 0.5);
    const std::vector<double> lr = log_probs(ref), lq = log_probs(q);
    const auto tr = top_k_of(lr, k), tq = top_k_of(lq, k);
    const TopKComparison est = compare_topk({tr, std::nullopt}, {tq, std::nullopt}, 0);
    const double full = compare_position(ref, q, 0).kld;
    ASSERT_GE(est.position.kld, -1e-12);
    ASSERT_LE(est.position.kld, full + 1e-12) << "trial " << trial;
    // The shortfall is P_rest * KL(P|rest || Q|rest) over the tokens not shared by both lists.
    std::vector<bool> shared(vocab, false);
    for (const auto& a : tr)
      for (const auto& b : tq)
        if (a.token == b.token) shared[static_cast<size_t>(a.token)] = true;
    double pr = 0, qr = 0;
    for (size_t i = 0; i < vocab; ++i)
      if (!shared[i]) {
        pr += std::exp(lr[i]);
        qr += std::exp(lq[i]);
      }
    double inside = 0;
    for (size_t i = 0; i < vocab; ++i)
      if (!shared[i]) inside += std::exp(lr[i]) / pr * ((lr[i] - std::log(pr)) - (lq[i] - std::log(qr)));
    EXPECT_NEAR(full - est.position.kld, pr * inside, 1e-9) << "trial " << trial;
  }
}

TEST(TopKKld, TokensListedOnOneSideGoToTheRestOnBoth) {
  // Reference lists {1: 0.6, 2: 0.3}; candidate {1: 0.5, 3: 0.4}. Shared {1}; rests 0.4 / 0.5.
  const std::vector<TopLogprob> r = {{1, std::log(0.6)}, {2, std::log(0.3)}};
  const std::vector<TopLogprob> q = {{3, std::log(0.4)}, {1, std::log(0.5)}};
  const TopKComparison c = compare_topk({r, std::nullopt}, {q, std::nullopt}, 1);
  EXPECT_EQ(c.shared, 1u);
  EXPECT_NEAR(c.ref_rest_mass, 0.4, 1e-15);
  EXPECT_NEAR(c.q_rest_mass, 0.5, 1e-15);
  EXPECT_NEAR(c.position.kld, 0.6 * std::log(0.6 / 0.5) + 0.4 * std::log(0.4 / 0.5), 1e-14);
  EXPECT_NEAR(c.kld_scaled, c.position.kld / 0.6, 1e-14);
  EXPECT_EQ(c.position.top1_q, 1u);
  EXPECT_TRUE(c.position.same_top1);
  // No shared token: no evidence either way.
  const std::vector<TopLogprob> other = {{7, std::log(0.9)}};
  const TopKComparison none = compare_topk({r, std::nullopt}, {other, std::nullopt}, 1);
  EXPECT_EQ(none.position.kld, 0.0);
  EXPECT_EQ(none.kld_scaled, 0.0);
}

TEST(TopKKld, DeltaPIsBoundedWhenTheTargetIsNotListed) {
  const std::vector<TopLogprob> r = {{1, std::log(0.7)}, {2, std::log(0.2)}};  // tail 0.1, smallest 0.2
  const std::vector<TopLogprob> q = {{1, std::log(0.6)}, {4, std::log(0.3)}};
  // Target 4: listed by the candidate only. The reference's p is in [0, min(0.2, 0.1)].
  const TopKComparison c = compare_topk({r, std::nullopt}, {q, std::nullopt}, 4);
  EXPECT_FALSE(c.p_ref_exact);
  EXPECT_TRUE(c.p_q_exact);
  EXPECT_NEAR(c.position.p_ref, 0.05, 1e-12);
  EXPECT_NEAR(c.delta_p_halfwidth, 0.05, 1e-12);
  EXPECT_NEAR(c.position.delta_p, 0.3 - 0.05, 1e-12);
  // A separately reported target logprob makes it exact (vLLM, SGLang).
  const TopKComparison e = compare_topk({r, std::log(0.01)}, {q, std::nullopt}, 4);
  EXPECT_TRUE(e.p_ref_exact);
  EXPECT_NEAR(e.position.p_ref, 0.01, 1e-15);
  EXPECT_EQ(e.delta_p_halfwidth, 0.0);
  EXPECT_NEAR(e.position.nll_ref, -std::log(0.01), 1e-12);
}

TEST(TopKKld, RejectsMalformedLists) {
  const std::vector<TopLogprob> ok = {{1, -0.5}};
  const std::vector<TopLogprob> empty;
  const std::vector<TopLogprob> twice = {{1, -0.5}, {1, -1.0}};
  const std::vector<TopLogprob> nan = {{1, std::nan("")}};
  const std::vector<TopLogprob> positive = {{1, 0.5}};
  const std::vector<TopLogprob> too_much = {{1, std::log(0.7)}, {2, std::log(0.6)}};
  for (const auto* bad : {&empty, &twice, &nan, &positive, &too_much}) {
    EXPECT_THROW(compare_topk({*bad, std::nullopt}, {ok, std::nullopt}, 1), Error);
    EXPECT_THROW(compare_topk({ok, std::nullopt}, {*bad, std::nullopt}, 1), Error);
  }
  EXPECT_THROW(compare_topk({ok, -3.0}, {ok, std::nullopt}, 1), Error);  // disagrees with its entry
  // Float32 rounding is not an error.
  const std::vector<TopLogprob> rounded = {{1, 2e-7}};
  EXPECT_NO_THROW(compare_topk({rounded, std::nullopt}, {ok, std::nullopt}, 1));
}

TEST(TopKOf, BestFirstLowerIdWinsTies) {
  const std::vector<double> lp = {-2.0, -1.0, -1.0, -3.0, -0.5};
  const auto top = top_k_of(lp, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 4);
  EXPECT_EQ(top[1].token, 1);
  EXPECT_EQ(top[2].token, 2);
  EXPECT_EQ(top_k_of(lp, 10).size(), 5u);
}

}  // namespace
}  // namespace kvgate::scoring
