#include "scoring/sequence.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvgate::scoring {
namespace {

using Tokens = std::vector<int32_t>;

TEST(Sequence, IdenticalSequencesMatch) {
  const Tokens a = {5, 9, 2};
  EXPECT_FALSE(first_divergence(a, a).has_value());
  EXPECT_TRUE(exact_match(a, a));
  EXPECT_TRUE(exact_match(Tokens{}, Tokens{}));
}

TEST(Sequence, FirstDifferingIndex) {
  EXPECT_EQ(first_divergence(Tokens{5, 9, 2, 7}, Tokens{5, 9, 3, 7}), 2u);
  EXPECT_EQ(first_divergence(Tokens{1}, Tokens{2}), 0u);
  EXPECT_FALSE(exact_match(Tokens{5, 9, 2}, Tokens{5, 9, 3}));
}

TEST(Sequence, PrefixDivergesAtItsLength) {
  EXPECT_EQ(first_divergence(Tokens{5, 9}, Tokens{5, 9, 2}), 2u);
  EXPECT_EQ(first_divergence(Tokens{5, 9, 2}, Tokens{5, 9}), 2u);
  EXPECT_EQ(first_divergence(Tokens{}, Tokens{4}), 0u);
}

}  // namespace
}  // namespace kvgate::scoring
