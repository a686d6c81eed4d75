#include "scoring/kld_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"

namespace kvgate::scoring {
namespace {

// Twelve positions (llama.cpp only reports uncertainties for more than ten):
// KLD = 1..12, NLL_ref = ln 2, NLL_q = ln 2 + 0.1, Δp alternating +0.1 / -0.1, top-1 agreeing
// at the first nine.
KldAccumulator twelve_positions() {
  KldAccumulator acc;
  for (int i = 0; i < 12; ++i) {
    PositionComparison c;
    c.kld = i + 1;
    c.nll_ref = std::log(2.0);
    c.nll_q = std::log(2.0) + 0.1;
    c.delta_p = i % 2 == 0 ? 0.1 : -0.1;
    c.same_top1 = i < 9;
    acc.add(c);
  }
  return acc;
}

TEST(KldReport, MeanAndUncertaintyAsLlamaCpp) {
  const KldReport r = twelve_positions().report();
  EXPECT_EQ(r.count, 12u);
  // mean 6.5; Σx²/n − mean² = 650/12 − 42.25; uncertainty sqrt(that / 11).
  EXPECT_DOUBLE_EQ(r.kld_mean.value, 6.5);
  EXPECT_NEAR(r.kld_mean.error, 1.0408329997330663, 1e-12);
}

TEST(KldReport, KldPercentiles) {
  const KldReport r = twelve_positions().report();
  EXPECT_EQ(r.kld.max, 12.0);
  EXPECT_EQ(r.kld.min, 1.0);
  EXPECT_DOUBLE_EQ(r.kld.median, 6.5);
  EXPECT_NEAR(r.kld.p99_9, 11.989, 1e-12);  // position 0.999 * 11 = 10.989
  EXPECT_NEAR(r.kld.p99, 11.89, 1e-12);
  EXPECT_NEAR(r.kld.p95, 11.45, 1e-12);
  EXPECT_NEAR(r.kld.p90, 10.9, 1e-12);
  EXPECT_NEAR(r.kld.p10, 2.1, 1e-12);
  EXPECT_NEAR(r.kld.p5, 1.55, 1e-12);
  EXPECT_NEAR(r.kld.p1, 1.11, 1e-12);
  EXPECT_NEAR(r.kld.p0_1, 1.011, 1e-12);
}

TEST(KldReport, PerplexitiesAndCorrelatedRatio) {
  const KldReport r = twelve_positions().report();
  EXPECT_NEAR(r.ppl_base.value, 2.0, 1e-12);
  EXPECT_NEAR(r.ppl_q.value, 2.2103418361512953, 1e-12);  // 2 e^0.1
  EXPECT_NEAR(r.ppl_base.error, 0.0, 1e-6);
  EXPECT_NEAR(r.ln_ppl_ratio.value, 0.1, 1e-12);
  // NLL_q − NLL_ref is the same everywhere, so the covariance cancels the variances.
  EXPECT_NEAR(r.ln_ppl_ratio.error, 0.0, 1e-6);
  EXPECT_NEAR(r.ppl_ratio.value, 1.1051709180756477, 1e-12);  // e^0.1
}

TEST(KldReport, DeltaPAndSameTop) {
  const KldReport r = twelve_positions().report();
  EXPECT_NEAR(r.delta_p_mean.value, 0.0, 1e-15);
  EXPECT_NEAR(r.delta_p_mean.error, 0.03015113445777636, 1e-12);  // sqrt(0.01 / 11)
  EXPECT_NEAR(r.delta_p.median, 0.0, 1e-15);
  EXPECT_EQ(r.delta_p.max, 0.1);
  EXPECT_EQ(r.delta_p.min, -0.1);
  EXPECT_EQ(r.delta_p.p75, 0.1);   // position 8.25 among six -0.1 then six 0.1
  EXPECT_EQ(r.delta_p.p25, -0.1);  // position 2.75
  EXPECT_NEAR(r.delta_p_rms.value, 0.1, 1e-12);
  EXPECT_NEAR(r.delta_p_rms.error, 0.0, 1e-9);  // every Δp² is 0.01
  EXPECT_DOUBLE_EQ(r.same_top1.value, 0.75);
  EXPECT_NEAR(r.same_top1.error, 0.13055824196677338, 1e-12);  // sqrt(0.75 * 0.25 / 11)
}

TEST(KldReport, LnPplRatioErrorIsStandardErrorOfPairedDifference) {
  // With llama.cpp's covariance term, the ratio's uncertainty is that of the mean of
  // NLL_q − NLL_ref: here the difference is 0 or 0.1 (population variance 0.0025), so
  // sqrt(0.0025 / 11), whatever NLL_ref itself does.
  KldAccumulator acc;
  for (int i = 0; i < 12; ++i) {
    PositionComparison c;
    c.nll_ref = 0.1 * i;
    c.nll_q = c.nll_ref + (i % 2) * 0.1;
    acc.add(c);
  }
  const KldReport r = acc.report();
  EXPECT_NEAR(r.ln_ppl_ratio.value, 0.05, 1e-12);
  EXPECT_NEAR(r.ln_ppl_ratio.error, 0.015075567228888183, 1e-9);
}

TEST(KldReport, FewPositionsHaveNoUncertainty) {
  KldAccumulator acc;
  for (int i = 0; i < 5; ++i) {
    PositionComparison c;
    c.kld = i;
    acc.add(c);
  }
  const KldReport r = acc.report();
  EXPECT_DOUBLE_EQ(r.kld_mean.value, 2.0);
  EXPECT_EQ(r.kld_mean.error, 0.0);
}

TEST(KldReport, IdenticalConfigsReportNoChange) {
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 0.25f};
  KldAccumulator acc;
  for (uint32_t t = 0; t < 40; ++t) acc.add(compare_position(logits, logits, t % 4));
  const KldReport r = acc.report();
  EXPECT_EQ(r.kld_mean.value, 0.0);
  EXPECT_EQ(r.kld.max, 0.0);
  EXPECT_EQ(r.ln_ppl_ratio.value, 0.0);
  EXPECT_EQ(r.delta_p_rms.value, 0.0);
  EXPECT_EQ(r.delta_p_rms.error, 0.0);
  EXPECT_EQ(r.same_top1.value, 1.0);
  EXPECT_EQ(r.same_top1.error, 0.0);
}

TEST(KldReport, FormattedLikeLlamaCpp) {
  const std::string text = format_kld_report(twelve_positions().report());
  EXPECT_NE(text.find("Mean    KLD:   6.500000 ±   1.040833\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Maximum KLD:  12.000000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("90.0%   KLD:  10.900000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Mean PPL(base)                :   2.000000 ±"), std::string::npos) << text;
  EXPECT_NE(text.find("Mean    Δp:  0.000 ± 3.015 %\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Same top p: 75.000 ± 13.056 %\n"), std::string::npos) << text;
  EXPECT_NE(text.find("RMS Δp    : 10.000 ± 0.000 %\n"), std::string::npos) << text;
}

TEST(KldReport, EmptyIsAnError) { EXPECT_THROW(KldAccumulator().report(), Error); }

}  // namespace
}  // namespace kvgate::scoring
