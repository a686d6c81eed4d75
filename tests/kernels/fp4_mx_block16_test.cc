// SGLang's fp4_mx_block16 KV cache (--kv-cache-dtype fp4_mx_block16, SGLang 0.5.23): the codec
// against hand-worked blocks whose bytes follow from SGLang's rules, and against a transcription
// of FP4MXBlock16KVQuantizeUtil.batched_quantize / batched_dequantize
// (python/sglang/srt/layers/quantization/kvfp4_tensor.py:49-140) written here operation for
// operation in f32, the precision its @torch.compile'd kernel computes bf16 K and V in.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/kv_config.h"
#include "kernels/kv_format.h"

namespace kvgate::kernels {
namespace {

// SGLang's layout: one scale byte per 16 values (its own buffer) and the values packed two per
// byte, element 2i in the low nibble.
struct SglangBlocks {
  std::vector<uint8_t> scales, packed;
};

SglangBlocks sglang_quantize(const std::vector<float>& x) {
  static const float bounds[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  SglangBlocks out;
  std::vector<uint8_t> fp4(x.size());
  for (size_t b = 0; b < x.size() / 16; ++b) {
    float block_max = 0.0f;  // reshaped.abs().max(dim=-1)
    for (size_t j = 0; j < 16; ++j) block_max = std::max(block_max, std::fabs(x[b * 16 + j]));
    // torch.ceil(torch.log2(torch.clamp(block_max / E2M1_MAX, min=1e-10)))
    const float scale_exp = std::ceil(std::log2f(std::max(block_max / 6.0f, 1e-10f)));
    out.scales.push_back(static_cast<uint8_t>(scale_exp + 127.0f));
    for (size_t j = 0; j < 16; ++j) {
      const float scaled = x[b * 16 + j] / std::exp2f(scale_exp);
      const uint8_t sign_bits = static_cast<uint8_t>((scaled < 0.0f ? 1 : 0) << 3);
      uint8_t magnitude_bits = 0;  // torch.sum(abs_vals.unsqueeze(-1) >= bounds, dim=-1)
      for (float bound : bounds) magnitude_bits = static_cast<uint8_t>(magnitude_bits + (std::fabs(scaled) >= bound ? 1 : 0));
      fp4[b * 16 + j] = static_cast<uint8_t>(sign_bits + magnitude_bits);
    }
  }
  for (size_t i = 0; i < x.size(); i += 2) out.packed.push_back(static_cast<uint8_t>((fp4[i + 1] << 4) + fp4[i]));
  return out;
}

std::vector<float> sglang_dequantize(const SglangBlocks& q) {
  static const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::vector<float> y;
  for (size_t i = 0; i < q.packed.size(); ++i)
    for (uint8_t v : {static_cast<uint8_t>(q.packed[i] & 0x0F), static_cast<uint8_t>((q.packed[i] >> 4) & 0x0F)}) {
      const float f = values[v & 0x07];
      y.push_back(((v & 0x08) != 0 ? -f : f) * std::exp2f(static_cast<float>(q.scales[y.size() / 16]) - 127.0f));
    }
  return y;
}

// kvgate's row: per block [scale byte][8 packed bytes].
std::vector<uint8_t> kvgate_layout(const SglangBlocks& q) {
  std::vector<uint8_t> row;
  for (size_t b = 0; b < q.scales.size(); ++b) {
    row.push_back(q.scales[b]);
    for (size_t i = 0; i < 8; ++i) row.push_back(q.packed[b * 8 + i]);
  }
  return row;
}

std::vector<uint8_t> encode(const Codec& c, const std::vector<float>& x) {
  std::vector<uint8_t> out(c.group_bytes());
  c.quantize_ref(x.data(), out.data());
  return out;
}

TEST(Fp4MxBlock16, HandWorkedBlocks) {
  const auto codec = make_codec("fp4_mx_block16", 64);
  ASSERT_EQ(codec->group_bytes(), 4u * 9u);
  // Block 0: amax 6 -> 6/6 = 1 = 2^0, byte 127. Ties round up: 0.25 -> 0.5 (code 1), 2.5 -> 3
  // (code 5), 5 -> 6 (code 7); -0.0 has no sign bit (it is not < 0).
  std::vector<float> x = {0.25f, -0.25f, 0.75f, 1.25f, 2.5f, 3.5f, 5.0f, 6.0f,
                          0.0f,  -0.0f,  0.1f,  -6.0f, 1.75f, 0.5f, 1.0f, 3.0f};
  // Block 1: amax 7 -> 7/6 -> log2 0.22 -> e = 1, byte 128: 7/2 = 3.5 -> code 6 (4.0, so 8).
  std::vector<float> b1(16, 0.0f);
  b1[0] = 7.0f;
  b1[1] = -1.0f;  // -0.5 at scale 2: code 9
  // Block 2: amax 0.75 -> 0.125 = 2^-3 exactly, byte 124.
  std::vector<float> b2(16, 0.0f);
  b2[5] = 0.75f;
  // Block 3: all zero -> clamp(0, 1e-10) -> e = ceil(-33.2) = -33, byte 94.
  std::vector<float> b3(16, 0.0f);
  x.insert(x.end(), b1.begin(), b1.end());
  x.insert(x.end(), b2.begin(), b2.end());
  x.insert(x.end(), b3.begin(), b3.end());
  const std::vector<uint8_t> bytes = encode(*codec, x);
  EXPECT_EQ(bytes[0], 127);
  const uint8_t block0[8] = {0x91, 0x32, 0x65, 0x77, 0x00, 0xF0, 0x14, 0x52};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(bytes[1 + i], block0[i]) << "byte " << i;
  EXPECT_EQ(bytes[9], 128);
  EXPECT_EQ(bytes[10], 0x96);
  EXPECT_EQ(bytes[18], 124);
  EXPECT_EQ(bytes[18 + 1 + 2], 0x70);  // element 5: the high nibble of byte 2, code 7 (6 * 2^-3)
  EXPECT_EQ(bytes[27], 94);
  std::vector<float> y(64);
  codec->dequantize_ref(bytes.data(), y.data());
  const float expect0[16] = {0.5f, -0.5f, 1.0f, 1.5f, 3.0f, 4.0f, 6.0f, 6.0f, 0, 0, 0, -6.0f, 2.0f, 0.5f, 1.0f, 3.0f};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[i], expect0[i]) << i;
  EXPECT_EQ(y[16], 8.0f);
  EXPECT_EQ(y[17], -1.0f);
  EXPECT_EQ(y[16 + 16 + 5], 0.75f);
  for (int i = 48; i < 64; ++i) EXPECT_EQ(y[i], 0.0f);
  // Not nvfp4: its round-to-nearest-even stores 0.25 as 0 and 2.5 as 2.
  const auto nvfp4 = make_codec("nvfp4", 64);
  std::vector<float> z(64);
  nvfp4->dequantize_ref(encode(*nvfp4, x).data(), z.data());
  EXPECT_EQ(z[0], 0.0f);
  EXPECT_EQ(z[4], 2.0f);
}

// A float log2 rounds log2(2^20 (1 + 2^-22)) to 20, so SGLang's scale there is 2^20 and the
// element rounds down to 6 * 2^20: kvgate follows the float log2, not the exact one (21).
TEST(Fp4MxBlock16, TheScaleFollowsAFloatLog2) {
  const auto codec = make_codec("fp4_mx_block16", 16);
  std::vector<float> x(16, 0.0f);
  x[0] = 6.0f * std::ldexp(1.0f + std::ldexp(1.0f, -22), 20);
  ASSERT_EQ(x[0] / 6.0f, std::ldexp(1.0f + std::ldexp(1.0f, -22), 20));
  const std::vector<uint8_t> bytes = encode(*codec, x);
  EXPECT_EQ(bytes[0], 127 + 20);
  EXPECT_EQ(bytes[1] & 0x0F, 7);
}

TEST(Fp4MxBlock16, EqualsTheTranscriptionOfSglangsQuantizer) {
  const auto codec = make_codec("fp4_mx_block16", 128);
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) / 9007199254740992.0;
  };
  int rows = 0;
  for (double magnitude : {1e-6, 1e-3, 0.05, 1.0, 7.0, 300.0, 1e5}) {
    for (int r = 0; r < 200; ++r, ++rows) {
      std::vector<float> x(128);
      for (float& v : x) {
        // Box-Muller, some rows with ties planted on the bounds at the block's own scale.
        const double n = std::sqrt(-2.0 * std::log(uniform() + 1e-300)) * std::cos(6.283185307179586 * uniform());
        v = static_cast<float>(n * magnitude);
      }
      if (r % 4 == 0)
        for (size_t b = 0; b < 8; ++b) {
          x[b * 16] = 6.0f;
          for (size_t j = 1; j < 8; ++j) x[b * 16 + j] = (j % 2 ? 1.0f : -1.0f) * (0.25f + 0.5f * static_cast<float>(j - 1));
        }
      const SglangBlocks ref = sglang_quantize(x);
      ASSERT_EQ(encode(*codec, x), kvgate_layout(ref)) << "row " << r << " at magnitude " << magnitude;
      std::vector<float> y(128);
      codec->dequantize_ref(kvgate_layout(ref).data(), y.data());
      EXPECT_EQ(y, sglang_dequantize(ref));
    }
  }
  EXPECT_EQ(rows, 1400);
}

TEST(Fp4MxBlock16, IsSglangsNameForIt) {
  EXPECT_EQ(parse_kv_config("fp4_mx_block16").canonical(), "fp4_mx_block16/fp4_mx_block16");
  EXPECT_DOUBLE_EQ(parse_kv_config("fp4_mx_block16").bits_per_element({1, 1, 64}), 4.5);
}

}  // namespace
}  // namespace kvgate::kernels
