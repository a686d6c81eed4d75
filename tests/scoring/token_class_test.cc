#include "scoring/token_class.h"

#include <gtest/gtest.h>

namespace kvgate::scoring {
namespace {

TEST(TokenClass, Digits) {
  EXPECT_EQ(classify_token("2024"), TokenClass::digits);
  EXPECT_EQ(classify_token(" 7"), TokenClass::digits);
  EXPECT_EQ(classify_token("3.5"), TokenClass::other);  // mixed with punctuation
}

TEST(TokenClass, Hangul) {
  EXPECT_EQ(classify_token("한국어"), TokenClass::hangul);
  EXPECT_EQ(classify_token(" 은"), TokenClass::hangul);
  EXPECT_EQ(classify_token("ㄱ"), TokenClass::hangul);        // compatibility jamo U+3131
  EXPECT_EQ(classify_token("\u1100"), TokenClass::hangul);  // choseong kiyeok
  EXPECT_EQ(classify_token("3월"), TokenClass::hangul);       // the Korean character decides
}

TEST(TokenClass, CodePunctuation) {
  EXPECT_EQ(classify_token("();"), TokenClass::code_punct);
  EXPECT_EQ(classify_token(" =>"), TokenClass::code_punct);
  EXPECT_EQ(classify_token("{"), TokenClass::code_punct);
  EXPECT_EQ(classify_token("_"), TokenClass::code_punct);
}

TEST(TokenClass, Other) {
  EXPECT_EQ(classify_token("hello"), TokenClass::other);
  EXPECT_EQ(classify_token(" "), TokenClass::other);
  EXPECT_EQ(classify_token(""), TokenClass::other);
  EXPECT_EQ(classify_token("日本"), TokenClass::other);
  EXPECT_EQ(classify_token("—"), TokenClass::other);  // U+2014 is not code punctuation
}

TEST(TokenClass, InvalidOrSplitUtf8IsOther) {
  EXPECT_EQ(classify_token("\xED\x95"), TokenClass::other);      // first two bytes of 한
  EXPECT_EQ(classify_token("\x9C"), TokenClass::other);          // lone continuation byte
  EXPECT_EQ(classify_token("\xC0\xB1"), TokenClass::other);      // overlong '1'
  EXPECT_EQ(classify_token("\xED\xA0\x80"), TokenClass::other);  // surrogate U+D800
}

TEST(TokenClass, NamesRoundTrip) {
  for (TokenClass c : kAllTokenClasses) EXPECT_EQ(parse_token_class(token_class_name(c)), c);
  EXPECT_FALSE(parse_token_class("letters").has_value());
}

}  // namespace
}  // namespace kvgate::scoring
