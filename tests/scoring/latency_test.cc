#include "scoring/latency.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace kvgate::scoring {
namespace {

TEST(Latency, HandComputedBreakdown) {
  const std::vector<double> t = {100, 130, 150, 190, 200};
  const LatencyBreakdown b = derive_latency(t);
  EXPECT_EQ(b.tokens, 5u);
  EXPECT_EQ(b.ttft, 100.0);
  EXPECT_EQ(b.latency, 200.0);
  EXPECT_EQ(b.tpot, 25.0);  // (200 - 100) / 4
  EXPECT_EQ(b.gaps, (std::vector<double>{30, 20, 40, 10}));
  EXPECT_DOUBLE_EQ(b.gap_p50, 25.0);  // sorted gaps 10 20 30 40
  EXPECT_DOUBLE_EQ(b.gap_p90, 37.0);  // position 2.7
  EXPECT_DOUBLE_EQ(b.gap_p99, 39.7);  // position 2.97
  EXPECT_EQ(b.gap_max, 40.0);
}

TEST(Latency, SingleTokenHasNoTpot) {
  const LatencyBreakdown b = derive_latency(std::vector<double>{42});
  EXPECT_EQ(b.ttft, 42.0);
  EXPECT_EQ(b.latency, 42.0);
  EXPECT_TRUE(std::isnan(b.tpot));
  EXPECT_TRUE(b.gaps.empty());
  EXPECT_TRUE(std::isnan(b.gap_p50));
}

TEST(Latency, RejectsBadTimestamps) {
  EXPECT_THROW(derive_latency(std::vector<double>{}), Error);
  EXPECT_THROW(derive_latency(std::vector<double>{10, 5}), Error);
  EXPECT_THROW(derive_latency(std::vector<double>{-1, 5}), Error);
  EXPECT_THROW(derive_latency(std::vector<double>{1, std::numeric_limits<double>::quiet_NaN()}), Error);
}

}  // namespace
}  // namespace kvgate::scoring
