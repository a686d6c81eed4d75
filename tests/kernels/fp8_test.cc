// FP8 conversions against the published definitions: the OCP 8-bit floating point spec (E4M3FN,
// E5M2) and the FNUZ variant used by AMD MI300 (bias 8, 0x80 = NaN, no infinities or -0).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/float_convert.h"

namespace kvgate {
namespace {

struct KindSpec {
  Fp8Kind kind;
  int exp_bits, man_bits, bias;
};
constexpr KindSpec kKinds[] = {{Fp8Kind::e4m3fn, 4, 3, 7}, {Fp8Kind::e5m2, 5, 2, 15}, {Fp8Kind::e4m3fnuz, 4, 3, 8}};

// The value a code denotes, written from the spec independently of float_convert.h:
// (-1)^s * 2^(E - bias) * (1 + M / 2^m) for E > 0, (-1)^s * 2^(1 - bias) * M / 2^m for E = 0.
double spec_value(uint8_t code, const KindSpec& k) {
  const int s = code >> 7;
  const int e = (code >> k.man_bits) & ((1 << k.exp_bits) - 1);
  const int m = code & ((1 << k.man_bits) - 1);
  if (k.kind == Fp8Kind::e4m3fnuz && code == 0x80) return std::numeric_limits<double>::quiet_NaN();
  if (k.kind == Fp8Kind::e4m3fn && (code & 0x7f) == 0x7f) return std::numeric_limits<double>::quiet_NaN();
  if (k.kind == Fp8Kind::e5m2 && e == 31)
    return m ? std::numeric_limits<double>::quiet_NaN() : (s ? -INFINITY : INFINITY);
  const double mag = e ? std::ldexp(1.0 + m / double(1 << k.man_bits), e - k.bias)
                       : std::ldexp(m / double(1 << k.man_bits), 1 - k.bias);
  return s ? -mag : mag;
}

TEST(Fp8, AllCodesDecodeToTheSpecValue) {
  for (const KindSpec& k : kKinds) {
    for (int c = 0; c < 256; ++c) {
      const double want = spec_value(static_cast<uint8_t>(c), k);
      const float got = fp8_to_f32(static_cast<uint8_t>(c), k.kind);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << "kind " << int(k.kind) << " code " << c;
      } else {
        EXPECT_EQ(static_cast<double>(got), want) << "kind " << int(k.kind) << " code " << c;
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << "kind " << int(k.kind) << " code " << c;
      }
    }
  }
}

TEST(Fp8, PublishedAnchorValues) {
  // E4M3FN: max finite 448 = 0x7E, 0x7F/0xFF NaN, no infinities; 1.0 = 0x38.
  EXPECT_EQ(fp8_to_f32(0x7e, Fp8Kind::e4m3fn), 448.0f);
  EXPECT_EQ(fp8_to_f32(0xfe, Fp8Kind::e4m3fn), -448.0f);
  EXPECT_TRUE(std::isnan(fp8_to_f32(0x7f, Fp8Kind::e4m3fn)));
  EXPECT_TRUE(std::isnan(fp8_to_f32(0xff, Fp8Kind::e4m3fn)));
  EXPECT_EQ(fp8_to_f32(0x38, Fp8Kind::e4m3fn), 1.0f);
  EXPECT_EQ(fp8_to_f32(0x01, Fp8Kind::e4m3fn), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_to_f32(0x07, Fp8Kind::e4m3fn), 7 * std::ldexp(1.0f, -9));  // largest subnormal
  EXPECT_EQ(fp8_to_f32(0x08, Fp8Kind::e4m3fn), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_TRUE(std::signbit(fp8_to_f32(0x80, Fp8Kind::e4m3fn)));       // -0 exists
  // E5M2: max finite 57344 = 0x7B, 0x7C = +inf, 0x7D..0x7F NaN; 1.0 = 0x3C.
  EXPECT_EQ(fp8_to_f32(0x7b, Fp8Kind::e5m2), 57344.0f);
  EXPECT_EQ(fp8_to_f32(0x7c, Fp8Kind::e5m2), INFINITY);
  EXPECT_EQ(fp8_to_f32(0xfc, Fp8Kind::e5m2), -INFINITY);
  EXPECT_TRUE(std::isnan(fp8_to_f32(0x7d, Fp8Kind::e5m2)));
  EXPECT_EQ(fp8_to_f32(0x3c, Fp8Kind::e5m2), 1.0f);
  EXPECT_EQ(fp8_to_f32(0x01, Fp8Kind::e5m2), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_to_f32(0x04, Fp8Kind::e5m2), std::ldexp(1.0f, -14));
  // E4M3FNUZ: bias 8, max 240 = 0x7F, 0x80 is the only NaN, no -0; 1.0 = 0x40.
  EXPECT_EQ(fp8_to_f32(0x7f, Fp8Kind::e4m3fnuz), 240.0f);
  EXPECT_EQ(fp8_to_f32(0xff, Fp8Kind::e4m3fnuz), -240.0f);
  EXPECT_TRUE(std::isnan(fp8_to_f32(0x80, Fp8Kind::e4m3fnuz)));
  EXPECT_EQ(fp8_to_f32(0x40, Fp8Kind::e4m3fnuz), 1.0f);
  EXPECT_EQ(fp8_to_f32(0x01, Fp8Kind::e4m3fnuz), std::ldexp(1.0f, -10));
  EXPECT_EQ(fp8_to_f32(0x08, Fp8Kind::e4m3fnuz), std::ldexp(1.0f, -7));
}

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (const KindSpec& k : kKinds) {
    for (int c = 0; c < 256; ++c) {
      const float v = fp8_to_f32(static_cast<uint8_t>(c), k.kind);
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(f32_to_fp8(v, k.kind), c) << "kind " << int(k.kind) << " code " << c;
    }
  }
}

// Between two adjacent codes of the same sign, the exact midpoint must go to the code with an
// even mantissa (its last bit 0), and the floats just beside it to the nearer code.
TEST(Fp8, RoundsToNearestEvenAtEveryMidpoint) {
  for (const KindSpec& k : kKinds) {
    const uint8_t max_code = fp8_spec(k.kind).max_code;
    for (int sign = 0; sign < 2; ++sign) {
      for (int c = 0; c < max_code; ++c) {
        const uint8_t lo = static_cast<uint8_t>(c | (sign << 7));
        const uint8_t hi = static_cast<uint8_t>((c + 1) | (sign << 7));
        if (k.kind == Fp8Kind::e4m3fnuz && lo == 0x80) continue;  // 0x80 is NaN, not -0
        const float a = fp8_to_f32(lo, k.kind), b = fp8_to_f32(hi, k.kind);
        const float mid = (a + b) / 2;  // exact: both are short binary fractions
        const uint8_t even = (c & 1) ? hi : lo;
        uint8_t want_mid = even;
        if (k.kind == Fp8Kind::e4m3fnuz && want_mid == 0x80) want_mid = 0x00;  // FNUZ has no -0
        EXPECT_EQ(f32_to_fp8(mid, k.kind), want_mid) << "kind " << int(k.kind) << " between " << int(lo);
        uint8_t want_lo = lo;
        if (k.kind == Fp8Kind::e4m3fnuz && want_lo == 0x80) want_lo = 0x00;
        EXPECT_EQ(f32_to_fp8(std::nextafter(mid, a), k.kind), want_lo) << int(lo);
        EXPECT_EQ(f32_to_fp8(std::nextafter(mid, b), k.kind), hi) << int(lo);
      }
    }
  }
}

// Saturation (vLLM clamps to +-max before converting; CUDA's conversion is used with satfinite):
// anything at or beyond the largest finite magnitude, infinities included, becomes +-max.
TEST(Fp8, SaturatesLargeValuesAndInfinities) {
  EXPECT_EQ(f32_to_fp8(448.0f, Fp8Kind::e4m3fn), 0x7e);
  EXPECT_EQ(f32_to_fp8(464.0f, Fp8Kind::e4m3fn), 0x7e);  // halfway to the (NaN) next step
  EXPECT_EQ(f32_to_fp8(1e30f, Fp8Kind::e4m3fn), 0x7e);
  EXPECT_EQ(f32_to_fp8(INFINITY, Fp8Kind::e4m3fn), 0x7e);
  EXPECT_EQ(f32_to_fp8(-INFINITY, Fp8Kind::e4m3fn), 0xfe);
  EXPECT_EQ(f32_to_fp8(61440.0f, Fp8Kind::e5m2), 0x7b);  // halfway between 57344 and 65536
  EXPECT_EQ(f32_to_fp8(INFINITY, Fp8Kind::e5m2), 0x7b);
  EXPECT_EQ(f32_to_fp8(-INFINITY, Fp8Kind::e5m2), 0xfb);
  EXPECT_EQ(f32_to_fp8(241.0f, Fp8Kind::e4m3fnuz), 0x7f);
  EXPECT_EQ(f32_to_fp8(-1e9f, Fp8Kind::e4m3fnuz), 0xff);
  EXPECT_EQ(f32_to_fp8(INFINITY, Fp8Kind::e4m3fnuz), 0x7f);
}

// NaN stays visible as the format's NaN code: one code, whatever the NaN's sign and payload
// (which the hardware picks; core/float_convert.h).
TEST(Fp8, NaNEncodesToTheNaNCode) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(f32_to_fp8(nan, Fp8Kind::e4m3fn), 0x7f);
  EXPECT_EQ(f32_to_fp8(-nan, Fp8Kind::e4m3fn), 0x7f);
  EXPECT_EQ(f32_to_fp8(f32_from_bits(0xffc00000u), Fp8Kind::e4m3fn), 0x7f);  // x86's indefinite
  EXPECT_EQ(f32_to_fp8(f32_from_bits(0xffc00000u), Fp8Kind::e5m2), 0x7f);
  EXPECT_TRUE(std::isnan(fp8_to_f32(f32_to_fp8(nan, Fp8Kind::e5m2), Fp8Kind::e5m2)));
  EXPECT_EQ(f32_to_fp8(nan, Fp8Kind::e4m3fnuz), 0x80);
  EXPECT_EQ(f32_to_fp8(-nan, Fp8Kind::e4m3fnuz), 0x80);
}

TEST(Fp8, TinyValuesAndSignedZero) {
  const float sub = std::ldexp(1.0f, -9);  // e4m3fn smallest subnormal
  EXPECT_EQ(f32_to_fp8(sub / 2, Fp8Kind::e4m3fn), 0x00);      // tie -> even (0)
  EXPECT_EQ(f32_to_fp8(sub * 1.5f, Fp8Kind::e4m3fn), 0x02);   // tie -> even (2)
  EXPECT_EQ(f32_to_fp8(-sub / 4, Fp8Kind::e4m3fn), 0x80);     // underflow keeps the sign
  EXPECT_EQ(f32_to_fp8(-0.0f, Fp8Kind::e4m3fn), 0x80);
  EXPECT_EQ(f32_to_fp8(-0.0f, Fp8Kind::e4m3fnuz), 0x00);      // FNUZ: 0x80 would be NaN
  EXPECT_EQ(f32_to_fp8(-std::ldexp(1.0f, -12), Fp8Kind::e4m3fnuz), 0x00);
  EXPECT_EQ(f32_to_fp8(std::numeric_limits<float>::denorm_min(), Fp8Kind::e5m2), 0x00);
  // Rounding up out of the subnormal range lands on the smallest normal.
  EXPECT_EQ(f32_to_fp8(std::ldexp(15.0f, -10), Fp8Kind::e4m3fn), 0x08);  // 7.5 quanta of 2^-9 -> 8
}

}  // namespace
}  // namespace kvgate
