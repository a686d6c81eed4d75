// llama.cpp block layouts: hand-worked vectors whose expected bytes are derived in the comments
// from ggml's published definitions (ggml-common.h block structs, ggml-quants.c
// quantize_row_*_ref), not produced by running our code. Both the reference and the fast
// quantize paths must produce them, and dequantize must give the values the layout defines.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "kernels/ggml_blocks.h"
#include "kernels/kv_format.h"

namespace kvgate::kernels {
namespace {

std::vector<float> block_with(std::initializer_list<std::pair<int, float>> set, float fill = 0.0f) {
  std::vector<float> x(32, fill);
  for (auto [i, v] : set) x[i] = v;
  return x;
}

void expect_bytes(const char* format, const std::vector<float>& x, const std::vector<uint8_t>& want) {
  auto codec = make_codec(format, 32);
  ASSERT_EQ(codec->group_bytes(), want.size()) << format;
  std::vector<uint8_t> ref(want.size()), fast(want.size());
  codec->quantize_ref(x.data(), ref.data());
  codec->quantize(x.data(), fast.data());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(int(ref[i]), int(want[i])) << format << " reference byte " << i;
    EXPECT_EQ(int(fast[i]), int(want[i])) << format << " fast byte " << i;
  }
}

std::vector<float> decode(const char* format, const std::vector<uint8_t>& bytes) {
  auto codec = make_codec(format, 32);
  std::vector<float> y(32), y_fast(32);
  codec->dequantize_ref(bytes.data(), y.data());
  codec->dequantize(bytes.data(), y_fast.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], y_fast[i]) << format << " element " << i;
  return y;
}

TEST(GgmlLayout, BlockSizesMatchGgml) {
  EXPECT_EQ(make_codec("q8_0", 128)->group_bytes(), 4u * 34);
  EXPECT_EQ(make_codec("q4_0", 128)->group_bytes(), 4u * 18);
  EXPECT_EQ(make_codec("q4_1", 128)->group_bytes(), 4u * 20);
  EXPECT_EQ(make_codec("q5_0", 128)->group_bytes(), 4u * 22);
  EXPECT_EQ(make_codec("q5_1", 128)->group_bytes(), 4u * 24);
  EXPECT_EQ(make_codec("iq4_nl", 128)->group_bytes(), 4u * 18);
  EXPECT_EQ(make_codec("mxfp4", 128)->group_bytes(), 4u * 17);
}

// q8_0: d = amax/127, qs = roundf(x * (1/d)) (half away from zero), d stored as fp16.
// amax = 127 -> d = 1.0 = fp16 0x3C00 (bytes 00 3C), id = 1:
//   127 -> 0x7F, -127 -> 0x81, 0.5 -> 1, -0.5 -> -1 (0xFF), 1.5 -> 2, 2.5 -> 3 (ties away, not
//   to even), -2.5 -> -3 (0xFD), 0.49 -> 0, 3.2 -> 3, -3.7 -> -4 (0xFC), zeros -> 0.
TEST(GgmlLayout, Q8_0RoundsHalfAwayFromZero) {
  const auto x = block_with({{0, 127}, {1, -127}, {2, 0.5f}, {3, -0.5f}, {4, 1.5f}, {5, 2.5f}, {6, -2.5f},
                             {7, 0.49f}, {8, 3.2f}, {9, -3.7f}});
  std::vector<uint8_t> want = {0x00, 0x3c, 0x7f, 0x81, 0x01, 0xff, 0x02, 0x03, 0xfd, 0x00, 0x03, 0xfc};
  want.resize(34, 0x00);
  expect_bytes("q8_0", x, want);
  const auto y = decode("q8_0", want);
  EXPECT_EQ(y[5], 3.0f);
  EXPECT_EQ(y[9], -4.0f);
}

// x[j] = j - 16: amax = 16, d = 16/127 = 0.1259842 -> fp16: 2^-3 * (1 + 8/1024) = 0x3008.
// id = 1/d rounds to exactly 7.9375 (= 127/16) in float, so qs[j] = roundf((j - 16) * 127/16):
// -16 -> -127 (0x81), -15 -> -119.06 -> -119 (0x89), ..., -8 -> -63.5 -> -64 (0xC0),
// 1 -> 7.94 -> 8, 8 -> 63.5 -> 64 (0x40), 9 -> 71.44 -> 71 (0x47), 15 -> 119.06 -> 119 (0x77).
TEST(GgmlLayout, Q8_0ScaleIsAmaxOver127InFp16) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  const std::vector<uint8_t> want = {0x08, 0x30, 0x81, 0x89, 0x91, 0x99, 0xa1, 0xa9, 0xb1, 0xb9, 0xc0, 0xc8, 0xd0, 0xd8,
                                     0xe0, 0xe8, 0xf0, 0xf8, 0x00, 0x08, 0x10, 0x18, 0x20, 0x28, 0x30, 0x38, 0x40, 0x47,
                                     0x4f, 0x57, 0x5f, 0x67, 0x6f, 0x77};
  expect_bytes("q8_0", x, want);
}

// q4_0: max = signed value of the first largest |x|; d = max / -8; q = min(15, trunc(x/d + 8.5));
// byte j = q[j] | q[j+16] << 4. Here max = -8 -> d = 1.0 (00 3C), id = 1:
//   x0 = -8 -> 0.5 -> 0;  x1 = 7 -> 15.5 -> 15;  x2 = 0 -> 8;  x3 = 0.5 -> 9;  x4 = -0.5 -> 8;
//   x5 = 2.4 -> 10.9 -> 10;  x6 = 7.9 -> 16.4 -> 16 -> clamped 15;  x16 = 7 -> 15;  x17 = -7.6 -> 0.9 -> 0;
//   zeros -> 8.
//   qs[0] = 0 | 15<<4 = F0, qs[1] = 15 | 0<<4 = 0F, qs[2] = 88, qs[3] = 89, qs[4] = 88, qs[5] = 8A,
//   qs[6] = 8F, qs[7..15] = 88.
TEST(GgmlLayout, Q4_0LowNibblesHoldTheFirstHalf) {
  const auto x = block_with({{0, -8}, {1, 7}, {3, 0.5f}, {4, -0.5f}, {5, 2.4f}, {6, 7.9f}, {16, 7}, {17, -7.6f}});
  std::vector<uint8_t> want = {0x00, 0x3c, 0xf0, 0x0f, 0x88, 0x89, 0x88, 0x8a, 0x8f};
  want.resize(18, 0x88);
  expect_bytes("q4_0", x, want);
  const auto y = decode("q4_0", want);
  EXPECT_EQ(y[0], -8.0f);  // (0 - 8) * 1
  EXPECT_EQ(y[6], 7.0f);   // (15 - 8) * 1
  EXPECT_EQ(y[17], -8.0f);
}

// A positive max flips the scale's sign: x0 = 8 and x1 = -8 tie in magnitude, the first wins,
// so max = 8, d = -1.0 (fp16 0xBC00 -> bytes 00 BC), id = -1:
//   x0 -> -8 + 8.5 = 0.5 -> 0;  x1 -> 8 + 8.5 = 16.5 -> 16 -> 15;  zeros -> 8.
//   qs[0] = 0 | 8<<4 = 80, qs[1] = 15 | 8<<4 = 8F, rest 88.
TEST(GgmlLayout, Q4_0FirstLargestMagnitudeSetsTheSign) {
  const auto x = block_with({{0, 8}, {1, -8}});
  std::vector<uint8_t> want = {0x00, 0xbc, 0x80, 0x8f};
  want.resize(18, 0x88);
  expect_bytes("q4_0", x, want);
}

// q4_1: d = (max - min)/15, m = min, q = min(15, trunc((x - min)/d + 0.5)).
// min = -1, max = 14 -> d = 1 (00 3C), m = -1 (fp16 0xBC00 -> 00 BC):
//   x0 = -1 -> 0.5 -> 0; x1 = 14 -> 15.5 -> 15; x2 = 0.5 -> 2.0 -> 2; x3 = 0.49 -> 1.99 -> 1;
//   x16 = 13.6 -> 15.1 -> 15; x17 = 2 -> 3.5 -> 3; zeros -> 1.5 -> 1.
//   qs[0] = 0 | 15<<4 = F0, qs[1] = 15 | 3<<4 = 3F, qs[2] = 2 | 1<<4 = 12, qs[3..15] = 11.
TEST(GgmlLayout, Q4_1StoresScaleThenMinimum) {
  const auto x = block_with({{0, -1}, {1, 14}, {2, 0.5f}, {3, 0.49f}, {16, 13.6f}, {17, 2}});
  std::vector<uint8_t> want = {0x00, 0x3c, 0x00, 0xbc, 0xf0, 0x3f, 0x12};
  want.resize(20, 0x11);
  expect_bytes("q4_1", x, want);
  const auto y = decode("q4_1", want);
  EXPECT_EQ(y[1], 14.0f);  // 15 * 1 + (-1)
  EXPECT_EQ(y[3], 0.0f);   // 1 * 1 + (-1)
}

// q5_0: d = max / -16, q = min(31, trunc(x/d + 16.5)); qs as q4_0 with the low 4 bits; bit j of
// the little-endian u32 qh = bit 4 of q[j]. max = -16 -> d = 1 (00 3C):
//   x0 = -16 -> 0; x1 = 15 -> 31; x2 = 3 -> 19 (0b10011); x16 = 15.2 -> 31; x17 = -0.7 -> 15; zeros -> 16.
//   qs[0] = 0 | F<<4 = F0, qs[1] = F | F<<4 = FF, qs[2] = 3 | 0<<4 = 03, qs[3..15] = 00.
//   qh: q[j] >= 16 for j = 1..15 (low half 0xFFFE) and j = 16, 18..31 (high half 0xFFFD)
//   -> 0xFFFDFFFE -> bytes FE FF FD FF.
TEST(GgmlLayout, Q5_0FifthBitsGoToQh) {
  const auto x = block_with({{0, -16}, {1, 15}, {2, 3}, {16, 15.2f}, {17, -0.7f}});
  std::vector<uint8_t> want = {0x00, 0x3c, 0xfe, 0xff, 0xfd, 0xff, 0xf0, 0xff, 0x03};
  want.resize(22, 0x00);
  expect_bytes("q5_0", x, want);
  const auto y = decode("q5_0", want);
  EXPECT_EQ(y[2], 3.0f);    // 19 - 16
  EXPECT_EQ(y[17], -1.0f);  // 15 - 16
  EXPECT_EQ(y[20], 0.0f);
}

// q5_1: d = (max - min)/31, m = min, q = trunc((x - min)/d + 0.5). min = 2, max = 33 -> d = 1
// (00 3C), m = 2.0 (fp16 0x4000 -> 00 40); fill value 10:
//   x0 = 2 -> 0; x1 = 33 -> 31; x2 = 20.4 -> 18.9 -> 18; x16 = 2.6 -> 1.1 -> 1; fill -> 8.5 -> 8.
//   qs[0] = 0 | 1<<4 = 10, qs[1] = F | 8<<4 = 8F, qs[2] = 2 | 8<<4 = 82, rest 88.
//   qh: only q1 = 31 and q2 = 18 reach 16 -> bits 1, 2 -> 0x00000006 -> 06 00 00 00.
TEST(GgmlLayout, Q5_1StoresScaleMinimumHighBitsThenNibbles) {
  const auto x = block_with({{0, 2}, {1, 33}, {2, 20.4f}, {16, 2.6f}}, 10.0f);
  std::vector<uint8_t> want = {0x00, 0x3c, 0x00, 0x40, 0x06, 0x00, 0x00, 0x00, 0x10, 0x8f, 0x82};
  want.resize(24, 0x88);
  expect_bytes("q5_1", x, want);
  const auto y = decode("q5_1", want);
  EXPECT_EQ(y[1], 33.0f);
  EXPECT_EQ(y[2], 20.0f);
}

// iq4_nl (quantize_row_iq4_nl_ref, ntry = -1): d0 = max / kvalues[0] = max / -127, indices by
// nearest grid value of x/d0 (bisection, ties upward), then d = sum(w q x) / sum(w q^2) with
// w = x^2, stored as fp16. Exact case: x = [127, 0, ...]: d0 = -1; 127 -> -127 -> index 0;
// 0 -> nearest of {-10, 1} is 1 -> index 8. sum(w q x) = -sum(w q q) exactly, so d = -1.0
// (00 BC). qs[0] = 0 | 8<<4 = 80, qs[1..15] = 88.
TEST(GgmlLayout, Iq4NlZeroMapsToGridValueOne) {
  const auto x = block_with({{0, 127}});
  std::vector<uint8_t> want = {0x00, 0xbc, 0x80};
  want.resize(18, 0x88);
  expect_bytes("iq4_nl", x, want);
}

// Least-squares rescale: x = [10, 5, 0, ...]: d0 = 10/-127 = -0.0787402, 1/d0 = -12.7 (float
// -12.6999998); 10 -> -127.0 -> index 0 (-127); 5 -> -63.5 -> between -65 (index 3) and -49:
// closer to -65 -> index 3; zeros -> index 8.
// sum(w q x) = 100*(-127)*10 + 25*(-65)*5 = -135125, sum(w q^2) = 100*16129 + 25*4225 = 1718525,
// d = -0.0786285 -> fp16 -(2^-4)(1 + 264/1024) = 0xAD08 (bytes 08 AD), not d0's 0xAD0A.
// qs[0] = 0 | 8<<4 = 80, qs[1] = 3 | 8<<4 = 83, rest 88.
TEST(GgmlLayout, Iq4NlRescalesByWeightedLeastSquares) {
  const auto x = block_with({{0, 10}, {1, 5}});
  std::vector<uint8_t> want = {0x08, 0xad, 0x80, 0x83};
  want.resize(18, 0x88);
  expect_bytes("iq4_nl", x, want);
  const auto y = decode("iq4_nl", want);
  EXPECT_FLOAT_EQ(y[0], -0.07861328125f * -127);
}

TEST(GgmlLayout, Iq4NlGridIsGgmlTable) {
  const int8_t want[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(ggml::kValuesIq4nl[i], want[i]);
}

// Multi-block rows are blocks back to back: block 1 of a 64-wide row equals a 32-wide row of
// the second half.
TEST(GgmlLayout, RowsAreConsecutiveBlocks) {
  for (const char* name : {"q8_0", "q5_0", "q5_1", "q4_0", "q4_1", "iq4_nl"}) {
    std::vector<float> x(64);
    for (int i = 0; i < 64; ++i) x[i] = std::sin(0.37f * i) * (i < 32 ? 1.0f : 5.0f);
    auto wide = make_codec(name, 64);
    auto narrow = make_codec(name, 32);
    std::vector<uint8_t> row(wide->group_bytes()), half(narrow->group_bytes());
    wide->quantize_ref(x.data(), row.data());
    narrow->quantize_ref(x.data() + 32, half.data());
    EXPECT_EQ(std::vector<uint8_t>(row.begin() + half.size(), row.end()), half) << name;
  }
}

}  // namespace
}  // namespace kvgate::kernels
