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

TEST(Sequence, TextDivergenceNeverSplitsACharacter) {
  EXPECT_FALSE(first_text_divergence("same", "same").has_value());
  EXPECT_EQ(first_text_divergence("The value is 42.", "The value is 41."), 14u);
  EXPECT_EQ(first_text_divergence("42", "42 apples"), 2u) << "a prefix diverges at its length";
  EXPECT_EQ(first_text_divergence("", "x"), 0u);
  // 가 (EA B0 80) and 각 (EA B0 81) share two bytes; the divergence is where the syllable starts.
  EXPECT_EQ(first_text_divergence("전화 가", "전화 각"), 7u);
}

}  // namespace
}  // namespace kvgate::scoring
