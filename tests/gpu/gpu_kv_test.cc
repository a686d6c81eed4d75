#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/gpu/gpu_convert.h"
#include "kernels/gpu/gpu_kv.h"
#include "kernels/kv_format.h"

namespace kvgate::kernels::gpu {
namespace {

constexpr float kFp8TensorScale = 0.0625f;  // so the test data's range uses the e4m3 exponents

bool is_ggml(KvFormat f) { return f == KvFormat::q8_0 || f == KvFormat::q4_0 || f == KvFormat::q4_1; }
// Odd sizes where the format allows them, so no kernel can lean on a power-of-two shape.
int head_dim_for(KvFormat f) { return is_ggml(f) ? 96 : 67; }
float scale_for(KvFormat f) { return f == KvFormat::fp8_e4m3 ? kFp8TensorScale : 1.0f; }

std::unique_ptr<Codec> cpu_codec(KvFormat f, int head_dim) {
  FormatOptions options;
  options.scale = scale_for(f);
  return make_codec(kv_format_name(f), head_dim, options);
}

// Rows at magnitudes from 2^-20 to 2^10, plus the rows that stress the edge cases: all zeros,
// a NaN, infinities, subnormals, ties, and a row whose largest magnitude is negative.
std::vector<float> probe_rows(int head_dim, int n_rows, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(head_dim) * n_rows);
  for (int r = 0; r < n_rows; ++r) {
    const double magnitude = std::ldexp(1.0, static_cast<int>(rng.below(31)) - 20);
    for (int i = 0; i < head_dim; ++i) x[static_cast<size_t>(r) * head_dim + i] = static_cast<float>(rng.normal() * magnitude);
  }
  auto row = [&](int r) { return x.data() + static_cast<size_t>(r) * head_dim; };
  std::fill(row(0), row(1), 0.0f);
  row(1)[5] = NAN;
  row(2)[3] = INFINITY;
  row(2)[40] = -INFINITY;
  for (int i = 0; i < head_dim; ++i) row(3)[i] = std::ldexp(static_cast<float>(i % 7) - 3.0f, -140);
  for (int i = 0; i < head_dim; ++i) row(4)[i] = 0.5f * static_cast<float>(i % 17) - 4.0f;  // exact halves
  row(5)[7] = -1000.0f;
  return x;
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || f32_bits(a) == f32_bits(b); }

class GpuKv : public ::testing::TestWithParam<KvFormat> {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no " << vendor() << " device present; GPU checks need one";
  }
};

// Runs without a device: the host API's layout must agree with the CPU registry before any
// byte comparison means anything.
TEST(GpuKvLayout, RowBytesEqualCpuGroupBytesAndBadShapesAreUsageErrors) {
  for (KvFormat f : {KvFormat::int8_pth, KvFormat::fp8_pth, KvFormat::q8_0, KvFormat::q4_0, KvFormat::q4_1,
                     KvFormat::fp8_e4m3}) {
    for (int head_dim : {32, 64, 96, 128, 256}) {
      EXPECT_EQ(kv_row_bytes(f, head_dim), cpu_codec(f, head_dim)->group_bytes()) << kv_format_name(f) << " d=" << head_dim;
    }
    try {
      kv_row_bytes(f, 0);
      ADD_FAILURE() << kv_format_name(f) << ": head_dim 0 accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
    }
    EXPECT_THROW(kv_row_bytes(f, kMaxKvHeadDim + 32), Error);
  }
  EXPECT_THROW(kv_row_bytes(KvFormat::q4_0, 67), Error);
  EXPECT_EQ(kv_row_bytes(KvFormat::int8_pth, 67), cpu_codec(KvFormat::int8_pth, 67)->group_bytes());
}

TEST_P(GpuKv, QuantizeWritesTheCpuCodecBytes) {
  const KvFormat f = GetParam();
  const int d = head_dim_for(f), n_rows = 37;
  const auto codec = cpu_codec(f, d);
  const size_t row = codec->group_bytes();
  const std::vector<float> x = probe_rows(d, n_rows, 11);
  std::vector<uint8_t> want(row * n_rows), got(row * n_rows, 0xAB);  // poisoned
  for (int r = 0; r < n_rows; ++r) codec->quantize_ref(x.data() + static_cast<size_t>(r) * d, want.data() + r * row);
  quantize_rows(f, d, scale_for(f), x.data(), n_rows, got.data());
  for (size_t b = 0; b < want.size(); ++b)
    ASSERT_EQ(got[b], want[b]) << kv_format_name(f) << " row " << b / row << " byte " << b % row;
}

TEST_P(GpuKv, DequantizeEqualsCpuCodecBitForBit) {
  const KvFormat f = GetParam();
  const int d = head_dim_for(f), n_rows = 29;
  const auto codec = cpu_codec(f, d);
  const size_t row = codec->group_bytes();
  // Codes from real data, then rows of arbitrary bytes (any scale bits, NaN codes included).
  const std::vector<float> x = probe_rows(d, n_rows, 12);
  std::vector<uint8_t> codes(row * n_rows);
  for (int r = 0; r < n_rows; ++r) codec->quantize_ref(x.data() + static_cast<size_t>(r) * d, codes.data() + r * row);
  Rng rng(13);
  for (size_t b = row * (n_rows - 6); b < codes.size(); ++b) codes[b] = static_cast<uint8_t>(rng.below(256));
  std::vector<float> want(static_cast<size_t>(d) * n_rows), got(want.size(), -12345.0f);
  for (int r = 0; r < n_rows; ++r) codec->dequantize_ref(codes.data() + r * row, want.data() + static_cast<size_t>(r) * d);
  dequantize_rows(f, d, scale_for(f), codes.data(), n_rows, got.data());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_TRUE(same_float(got[i], want[i])) << kv_format_name(f) << " row " << i / d << " element " << i % d << ": got "
                                             << got[i] << " want " << want[i];
}

// Float64 softmax attention over the CPU codec's dequantized rows.
std::vector<double> reference_attention(const Codec& codec, const std::vector<uint8_t>& keys,
                                        const std::vector<uint8_t>& values, int n_tokens, const std::vector<float>& q,
                                        int n_q, double softmax_scale) {
  const int d = codec.head_dim();
  const size_t row = codec.group_bytes();
  std::vector<float> k(static_cast<size_t>(n_tokens) * d), v(k.size());
  for (int t = 0; t < n_tokens; ++t) {
    codec.dequantize_ref(keys.data() + t * row, k.data() + static_cast<size_t>(t) * d);
    codec.dequantize_ref(values.data() + t * row, v.data() + static_cast<size_t>(t) * d);
  }
  std::vector<double> out(static_cast<size_t>(n_q) * d, 0.0);
  for (int h = 0; h < n_q; ++h) {
    std::vector<double> s(n_tokens);
    double max = -INFINITY;
    for (int t = 0; t < n_tokens; ++t) {
      double dot = 0.0;
      for (int i = 0; i < d; ++i) dot += static_cast<double>(q[static_cast<size_t>(h) * d + i]) * k[static_cast<size_t>(t) * d + i];
      s[t] = dot * softmax_scale;
      max = std::max(max, s[t]);
    }
    double sum = 0.0;
    for (int t = 0; t < n_tokens; ++t) sum += s[t] = std::exp(s[t] - max);
    for (int t = 0; t < n_tokens; ++t)
      for (int i = 0; i < d; ++i) out[static_cast<size_t>(h) * d + i] += s[t] / sum * v[static_cast<size_t>(t) * d + i];
  }
  return out;
}

TEST_P(GpuKv, SplitDecodeAttentionMatchesFloat64Reference) {
  const KvFormat f = GetParam();
  const int d = head_dim_for(f), n_tokens = 301, n_q = 4;  // a GQA group of 4 query heads
  const auto codec = cpu_codec(f, d);
  const size_t row = codec->group_bytes();
  Rng rng(14);
  std::vector<float> kx(static_cast<size_t>(n_tokens) * d), vx(kx.size()), q(static_cast<size_t>(n_q) * d);
  for (float& e : kx) e = static_cast<float>(rng.normal());
  for (float& e : vx) e = static_cast<float>(rng.normal());
  for (float& e : q) e = static_cast<float>(2.0 * rng.normal());  // peaked enough that the softmax matters
  std::vector<uint8_t> keys(row * n_tokens), values(row * n_tokens);
  for (int t = 0; t < n_tokens; ++t) {
    codec->quantize_ref(kx.data() + static_cast<size_t>(t) * d, keys.data() + t * row);
    codec->quantize_ref(vx.data() + static_cast<size_t>(t) * d, values.data() + t * row);
  }
  const double softmax_scale = 1.0 / std::sqrt(static_cast<double>(d));
  const std::vector<double> want = reference_attention(*codec, keys, values, n_tokens, q, n_q, softmax_scale);
  double energy = 0.0;
  for (double w : want) energy += w * w;
  ASSERT_GT(energy, 0.0);

  // Chunks of 7 (43 partials and a ragged tail), 64 and one chunk covering everything.
  for (int chunk : {7, 64, 1000}) {
    DecodeAttentionArgs args;
    args.key_format = args.value_format = f;
    args.head_dim = d;
    args.key_scale = args.value_scale = scale_for(f);
    args.n_tokens = n_tokens;
    args.n_query_heads = n_q;
    args.softmax_scale = static_cast<float>(softmax_scale);
    args.chunk_tokens = chunk;
    std::vector<float> got(want.size(), NAN);  // poisoned: an unwritten element fails the NaN check
    decode_attention(args, keys.data(), values.data(), q.data(), got.data());
    double err = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << kv_format_name(f) << " chunk " << chunk << " element " << i;
      err += (got[i] - want[i]) * (got[i] - want[i]);
    }
    EXPECT_LT(err / energy, 1e-6) << kv_format_name(f) << " chunk " << chunk;
  }
}

// Runs without a device: argument checks come before any driver call.
TEST(GpuKvLayout, BadAttentionAndScaleArgumentsAreUsageErrors) {
  for (KvFormat f : {KvFormat::int8_pth, KvFormat::fp8_pth, KvFormat::q8_0, KvFormat::q4_0, KvFormat::q4_1,
                     KvFormat::fp8_e4m3}) {
    DecodeAttentionArgs args;
    args.key_format = args.value_format = f;
    args.head_dim = head_dim_for(f);
    args.key_scale = args.value_scale = scale_for(f);
    args.n_tokens = 0;
    const std::vector<float> q(args.head_dim);
    std::vector<float> out(args.head_dim);
    try {
      decode_attention(args, nullptr, nullptr, q.data(), out.data());
      ADD_FAILURE() << kv_format_name(f) << ": n_tokens 0 accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
    }
    args.n_tokens = 1;
    args.chunk_tokens = 0;
    EXPECT_THROW(decode_attention(args, nullptr, nullptr, q.data(), out.data()), Error) << kv_format_name(f);
  }
  float x = 1.0f;
  uint8_t code = 0;
  EXPECT_THROW(quantize_rows(KvFormat::fp8_e4m3, 1, 0.0f, &x, 1, &code), Error);
  EXPECT_THROW(quantize_rows(KvFormat::fp8_e4m3, 1, NAN, &x, 1, &code), Error);
  EXPECT_THROW(quantize_rows(KvFormat::q8_0, 40, 1.0f, &x, 1, &code), Error);
}

INSTANTIATE_TEST_SUITE_P(GpuFormats, GpuKv,
                         ::testing::Values(KvFormat::int8_pth, KvFormat::fp8_pth, KvFormat::q8_0, KvFormat::q4_0,
                                           KvFormat::q4_1, KvFormat::fp8_e4m3),
                         [](const ::testing::TestParamInfo<KvFormat>& info) { return std::string(kv_format_name(info.param)); });

}  // namespace
}  // namespace kvgate::kernels::gpu
