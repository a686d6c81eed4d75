// mxfp4 as ggml stores it (block_mxfp4: an E8M0 exponent byte and 32 E2M1 nibbles): the codec
// against a transcription of ggml-quants.c's quantize_row_mxfp4_ref and dequantize_row_mxfp4
// written here from their definition (with the C library's log2f, as ggml calls it), plus
// hand-worked blocks whose bytes follow from the OCP MX rules.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/ggml_blocks.h"
#include "kernels/kv_format.h"

namespace kvgate::kernels {
namespace {

// kvalues_mxfp4 of ggml-common.h: the E2M1 values doubled, so the scale is halved.
constexpr int8_t kGrid[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// quantize_row_mxfp4_ref for one block. The exponent is (uint8_t)(floorf(log2f(amax)) - 2 + 127);
// ggml's x86-64 build converts through a 32-bit cvttss2si and keeps the low byte, which is what
// the int cast and the uint8 wrap do here for finite values (an infinite amax gives byte 0).
void reference_quantize(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
  uint8_t e = 0;
  if (amax > 0.0f) {
    const float v = std::floor(std::log2(amax)) - 2 + 127;
    e = std::isinf(v) ? 0 : static_cast<uint8_t>(static_cast<int>(v));
  }
  const float d = std::ldexp(1.0f, e - 128);  // GGML_E8M0_TO_FP32_HALF
  auto best_index = [&](float v) {
    int best = 0;
    float best_err = std::fabs(kGrid[0] * d - v);
    for (int i = 1; i < 16; ++i) {
      const float err = std::fabs(kGrid[i] * d - v);
      if (err < best_err) {
        best = i;
        best_err = err;
      }
    }
    return best;
  };
  out[0] = e;
  for (int j = 0; j < 16; ++j) out[1 + j] = static_cast<uint8_t>(best_index(x[j]) | (best_index(x[16 + j]) << 4));
}

float reference_value(const uint8_t* block, int j) {
  const float d = std::ldexp(1.0f, block[0] - 128);
  const int code = j < 16 ? block[1 + j] & 0x0f : block[1 + j - 16] >> 4;
  return kGrid[code] * d;
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || f32_bits(a) == f32_bits(b); }

// The exponent comes from the bits, not from log2f (the GPU's rounds differently), and must be
// what glibc's correctly rounded log2f gives: just below a power of two log2f rounds up to it.
TEST(Mxfp4, FloorLog2EqualsTheCLibraryNearEveryPowerOfTwo) {
  int rounded_up = 0;
  for (int k = -149; k <= 127; ++k) {
    const uint32_t at = f32_bits(std::ldexp(1.0f, k));
    for (int64_t step = -300; step <= 300; ++step) {
      const int64_t bits = static_cast<int64_t>(at) + step;
      if (bits <= 0 || bits >= 0x7f800000) continue;
      const float a = f32_from_bits(static_cast<uint32_t>(bits));
      const int want = static_cast<int>(std::floor(std::log2(a)));
      ASSERT_EQ(ggml::floor_log2f(a), want) << "a = " << std::hexfloat << a;
      rounded_up += want > std::ilogb(a) ? 1 : 0;
    }
  }
  EXPECT_GT(rounded_up, 1000);  // the case the bit-level exponent alone would get wrong
  Rng rng(41);
  for (int i = 0; i < 1 << 20; ++i) {
    const float a = f32_from_bits(static_cast<uint32_t>(1 + rng.below(0x7f7fffff)));
    ASSERT_EQ(ggml::floor_log2f(a), static_cast<int>(std::floor(std::log2(a)))) << std::hexfloat << a;
  }
}

// 32-element blocks: random at magnitudes from 2^-140 (amax below 2^-125: the wrapped
// exponent) to 2^120, and blocks of zeros, NaN, infinities, subnormals, grid midpoints (ties go
// to the first index) and maxima just below a power of two.
TEST(Mxfp4, QuantizeEqualsGgmlsReference) {
  const auto codec = make_codec("mxfp4", 32);
  ASSERT_EQ(codec->group_bytes(), 17u);
  Rng rng(7);
  std::vector<std::vector<float>> blocks;
  for (int m = -140; m <= 120; m += 2)
    for (int r = 0; r < 24; ++r) {
      std::vector<float> x(32);
      for (float& v : x) v = static_cast<float>(std::ldexp(rng.normal(), m));
      blocks.push_back(x);
    }
  blocks.push_back(std::vector<float>(32, 0.0f));
  blocks.push_back(std::vector<float>(32, -0.0f));
  for (float special : {NAN, INFINITY, -INFINITY, std::ldexp(1.0f, -149), FLT_MAX, -FLT_MAX}) {
    std::vector<float> x(32, 0.75f);
    x[5] = special;
    blocks.push_back(x);
  }
  for (int k = -20; k <= 20; ++k) {
    std::vector<float> x(32);
    const float d = std::ldexp(1.0f, k);
    for (int j = 0; j < 32; ++j) x[j] = 0.5f * (kGrid[j % 7] + kGrid[j % 7 + 1]) * d * (j & 1 ? -1.0f : 1.0f);
    blocks.push_back(x);
    x[0] = std::nextafter(std::ldexp(8.0f, k), 0.0f);  // amax just below a power of two
    blocks.push_back(x);
  }
  for (const std::vector<float>& x : blocks) {
    uint8_t want[17], got[17], fast[17];
    reference_quantize(x.data(), want);
    codec->quantize_ref(x.data(), got);
    codec->quantize(x.data(), fast);
    ASSERT_EQ(0, std::memcmp(want, got, 17)) << "amax block starting " << x[0] << ", exponent " << int(want[0])
                                            << " vs " << int(got[0]);
    ASSERT_EQ(0, std::memcmp(want, fast, 17));
  }
}

// Every exponent byte with every code: the value is the doubled grid times 2^(e - 128),
// subnormal scales included, by the reference and by the fast (AVX2) decode.
TEST(Mxfp4, DequantizeIsTheGridTimesTheScale) {
  const auto codec = make_codec("mxfp4", 32);
  uint8_t block[17];
  float y[32], y_fast[32];
  for (int e = 0; e < 256; ++e)
    for (int half = 0; half < 2; ++half) {
      block[0] = static_cast<uint8_t>(e);
      for (int j = 0; j < 16; ++j) block[1 + j] = static_cast<uint8_t>((j + 8 * half) | ((15 - j) << 4));
      codec->dequantize_ref(block, y);
      codec->dequantize(block, y_fast);
      for (int j = 0; j < 32; ++j) {
        ASSERT_TRUE(same_float(y[j], reference_value(block, j))) << "e " << e << " element " << j;
        ASSERT_TRUE(same_float(y_fast[j], y[j])) << "e " << e << " element " << j;
      }
    }
}

// amax = 7 (the largest magnitude, at x[16]) -> floor(log2 7) = 2 -> e = 2 - 2 + 127 = 0x7F,
// d = 2^(127 - 128) = 0.5, so the levels are 0, .5, 1, 1.5, 2, 3, 4, 6 and their negatives.
//   x0 = 6 -> 6 (index 7); x16 = 7 clips to 6 (7); x1 = 1 (2); x17 = -3.2 -> -3 (13);
//   x2 = -0.5 (9); x3 = 0.25: 0 and 0.5 tie, the first index wins (0); x4 = 2.5: 2 and 3 tie (4);
//   x5 = 5: 4 and 6 tie (6); x6 = -6 (15); x7 = 0.75: 0.5 and 1 tie (1); zeros (0).
// qs[j] = index(x[j]) | index(x[j + 16]) << 4.
TEST(Mxfp4, HandWorkedBlock) {
  std::vector<float> x(32, 0.0f);
  x[0] = 6, x[1] = 1, x[2] = -0.5f, x[3] = 0.25f, x[4] = 2.5f, x[5] = 5, x[6] = -6, x[7] = 0.75f;
  x[16] = 7, x[17] = -3.2f;
  const std::vector<uint8_t> want = {0x7f, 0x77, 0xd2, 0x09, 0x00, 0x04, 0x06, 0x0f, 0x01, 0, 0, 0, 0, 0, 0, 0, 0};
  const auto codec = make_codec("mxfp4", 32);
  std::vector<uint8_t> got(17);
  codec->quantize_ref(x.data(), got.data());
  EXPECT_EQ(got, want);
  std::vector<float> y(32);
  codec->dequantize_ref(got.data(), y.data());
  EXPECT_EQ(y[0], 6.0f);
  EXPECT_EQ(y[16], 6.0f);
  EXPECT_EQ(y[17], -3.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[7], 0.5f);
}

// The largest magnitude sets the scale 2^(floor(log2 amax) - 2): amax = 8 gives e = 0x80 and d = 1,
// so 8 is on the grid; the float just below 8 has log2f = 3 after rounding, so it gets the same
// scale and decodes to 8, where the plain binary exponent (2) would have clipped it to 6.
TEST(Mxfp4, ExponentFollowsLog2fJustBelowAPowerOfTwo) {
  const auto codec = make_codec("mxfp4", 32);
  std::vector<float> x(32, 0.0f);
  std::vector<uint8_t> got(17);
  std::vector<float> y(32);
  x[0] = 8.0f;
  codec->quantize_ref(x.data(), got.data());
  EXPECT_EQ(got[0], 0x80);
  EXPECT_EQ(got[1], 0x06);
  x[0] = std::nextafter(8.0f, 0.0f);
  codec->quantize_ref(x.data(), got.data());
  EXPECT_EQ(got[0], 0x80);
  codec->dequantize_ref(got.data(), y.data());
  EXPECT_EQ(y[0], 8.0f);
  x[0] = 7.99f;  // far enough below 8 that log2f stays below 3
  codec->quantize_ref(x.data(), got.data());
  EXPECT_EQ(got[0], 0x7f);
  codec->dequantize_ref(got.data(), y.data());
  EXPECT_EQ(y[0], 6.0f);
}

}  // namespace
}  // namespace kvgate::kernels
