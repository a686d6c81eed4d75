#include "scoring/load_summary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvgate::scoring {
namespace {

RequestTiming ok(double arrival, double ttft, double tpot, double latency, int64_t out, int64_t prompt,
                 std::optional<int64_t> cached) {
  return {true, arrival, ttft, tpot, latency, prompt, out, cached};
}

TEST(LoadSummary, PercentilesGoodputAndHitRate) {
  const double nan = std::nan("");
  const std::vector<RequestTiming> r = {
      ok(0, 100, 10, 130, 4, 100, 50),         // good
      ok(500, 300, 20, 360, 4, 100, 0),        // TTFT over the SLO
      ok(1000, 150, 50, 300, 4, 200, 100),     // TPOT over the SLO
      ok(1500, 120, nan, 120, 1, 100, std::nullopt),  // one token: no TPOT, good; no cache count
      {false, 2000, nan, nan, nan, 100, 0, std::nullopt},
  };
  const LoadSummary s = summarize_load(r, {200, 30});
  EXPECT_EQ(s.requests, 5);
  EXPECT_EQ(s.succeeded, 4);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.good, 2);
  EXPECT_DOUBLE_EQ(s.goodput_share, 0.4);
  // First arrival 0 ms to the last completion, 1500 + 120 ms.
  EXPECT_DOUBLE_EQ(s.duration_s, 1.62);
  EXPECT_DOUBLE_EQ(s.goodput_per_s, 2 / 1.62);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 13 / 1.62);
  EXPECT_DOUBLE_EQ(s.ttft_p50, 135);  // 100, 120, 150, 300
  EXPECT_DOUBLE_EQ(s.tpot_p50, 20);   // 10, 20, 50: the one-token request has none
  EXPECT_EQ(s.hit_reported, 3);
  EXPECT_DOUBLE_EQ(s.hit_rate, 150.0 / 400.0);
}

TEST(LoadSummary, NothingMeasuredIsNaNNotZero) {
  const std::vector<RequestTiming> r = {{false, 0, 0, 0, 0, 10, 0, std::nullopt}};
  const LoadSummary s = summarize_load(r, {1, 1});
  EXPECT_EQ(s.failed, 1);
  EXPECT_TRUE(std::isnan(s.ttft_p50));
  EXPECT_TRUE(std::isnan(s.hit_rate));
  EXPECT_TRUE(std::isnan(s.goodput_per_s));
  EXPECT_EQ(s.goodput_share, 0.0);
}

}  // namespace
}  // namespace kvgate::scoring
