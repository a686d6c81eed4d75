#include "core/float_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kvgate {
namespace {

TEST(F16, EveryFiniteHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t code = static_cast<uint16_t>(h);
    const float f = f16_to_f32(code);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << h;
      continue;
    }
    EXPECT_EQ(f32_to_f16(f), code) << "code " << h;
  }
}

// A NaN made by arithmetic is x86's indefinite 0xFFC00000 (or the NaN operand's bits) on the CPU
// and 0x7FFFFFFF on NVIDIA GPUs; a codec storing either must write the same bytes on both.
TEST(F16, EveryNaNEncodesToOneCode) {
  for (uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7fffffffu, 0xffffffffu, 0x7f800001u, 0x7fa00000u})
    EXPECT_EQ(f32_to_f16(f32_from_bits(bits)), 0x7e00) << std::hex << bits;
}

TEST(F16, KnownValuesFromIeee754) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // the midpoint to 2^16 rounds to even = inf
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // half of it: tie to even (0)
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 quanta: tie to even (2)
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  // 1 + 2^-11 is halfway between 1 and the next half: ties to even (1.0).
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(BF16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808001u)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0xffc00000u)), 0x7fc0);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_bf16(f), b);
    }
  }
}

}  // namespace
}  // namespace kvgate
