#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/gpu/gpu_convert.h"
#include "kernels/gpu/gpu_kv.h"
#include "kernels/gpu/tq_params.h"
#include "kernels/kv_format.h"
#include "tests/kernels/gpu_row_cases.h"

namespace kvgate::kernels::gpu {
namespace {

using testing::head_dim_for;
using testing::probe_rows;
using testing::same_float;

// The side of a cache storing `f`, with TurboQuant's constants where it has them.
KvSideFormat side_for(KvFormat f, int head_dim) {
  KvSideFormat side{f, testing::tensor_scale_for(f), std::nullopt};
  if (is_tq(f)) side.tq = make_tq_params(tq_bits(f), head_dim);
  return side;
}
// TurboQuant formats are keys only; their caches store f16 values.
KvFormat value_format_for(KvFormat f) { return is_tq(f) ? KvFormat::f16 : f; }
float scale_for(KvFormat f) { return testing::tensor_scale_for(f); }

std::unique_ptr<Codec> cpu_codec(KvFormat f, int head_dim) {
  FormatOptions options;
  options.scale = scale_for(f);
  return make_codec(kv_format_name(f), head_dim, options);
}

class GpuKv : public ::testing::TestWithParam<KvFormat> {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no " << vendor() << " device present; GPU checks need one";
  }
};

// Runs without a device: the host API's layout must agree with the CPU registry before any
// byte comparison means anything.
TEST(GpuKvLayout, RowBytesEqualCpuGroupBytesAndBadShapesAreUsageErrors) {
  for (KvFormat f : kAllKvFormats) {
    for (int head_dim : {32, 64, 96, 128, 256}) {
      if (is_tq(f) && head_dim == 96) continue;  // the rotation needs a power of two
      EXPECT_EQ(kv_row_bytes(f, head_dim), cpu_codec(f, head_dim)->group_bytes()) << kv_format_name(f) << " d=" << head_dim;
    }
    EXPECT_EQ(kv_format_named(kv_format_name(f)), f);
    try {
      kv_row_bytes(f, 0);
      ADD_FAILURE() << kv_format_name(f) << ": head_dim 0 accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
    }
    EXPECT_THROW(kv_row_bytes(f, kMaxKvHeadDim + 32), Error);
  }
  EXPECT_FALSE(kv_format_named("tq3.5").has_value());
  EXPECT_FALSE(kv_format_named("kivi4_k").has_value());
  EXPECT_THROW(kv_row_bytes(KvFormat::q4_0, 67), Error);
  EXPECT_THROW(kv_row_bytes(KvFormat::int4_pth, 67), Error);
  EXPECT_EQ(kv_row_bytes(KvFormat::int8_pth, 67), cpu_codec(KvFormat::int8_pth, 67)->group_bytes());
}

// Runs without a device: shapes and scales are checked before any driver call.
TEST(GpuKvLayout, BadCacheShapesAndScalesAreUsageErrors) {
  PagedKvShape shape;
  shape.head_dim = 64;
  shape.n_kv_heads = 0;
  EXPECT_THROW(DevicePagedKv(shape, 16), Error);
  shape.n_kv_heads = 2;
  shape.key.format = KvFormat::fp8_e4m3;
  shape.key.scale = 0.0f;
  EXPECT_THROW(DevicePagedKv(shape, 16), Error);
  shape.key.scale = 1.0f;
  shape.page_tokens = 8;
  EXPECT_THROW(DevicePagedKv(shape, 16, {0, 0}), Error);  // not a permutation
  EXPECT_THROW(DevicePagedKv(shape, 16, {0}), Error);     // too few pages
  float x = 1.0f;
  uint8_t code = 0;
  EXPECT_THROW(quantize_rows(KvFormat::fp8_e4m3, 1, 0.0f, &x, 1, &code), Error);
  EXPECT_THROW(quantize_rows(KvFormat::fp8_e5m2, 1, NAN, &x, 1, &code), Error);
  EXPECT_THROW(quantize_rows(KvFormat::q8_0, 40, 1.0f, &x, 1, &code), Error);
}

TEST_P(GpuKv, QuantizeWritesTheCpuCodecBytes) {
  const KvFormat f = GetParam();
  if (is_tq(f)) GTEST_SKIP() << "tq{b} needs its codec constants: AppendStoresTheCpuCodecBytesInPagedOrder covers it";
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
  if (is_tq(f)) GTEST_SKIP() << "tq{b} needs its codec constants: the attention tests decode it";
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

// A cache of 3 KV heads, 16-token pages stored in a scrambled pool order, filled in chunks of
// odd sizes, plus the CPU codec's view of the same data.
struct Filled {
  static constexpr int kKvHeads = 3, kPageTokens = 16;
  int d = 0, n_tokens = 0;
  std::unique_ptr<Codec> codec, value_codec;
  std::unique_ptr<DevicePagedKv> cache;
  std::vector<float> k, v;  // [n_tokens][kKvHeads][d]
};

Filled fill(KvFormat f, int n_tokens, uint64_t seed) {
  Filled c;
  c.d = head_dim_for(f);
  c.n_tokens = n_tokens;
  c.codec = cpu_codec(f, c.d);
  c.value_codec = cpu_codec(value_format_for(f), c.d);
  PagedKvShape shape;
  shape.head_dim = c.d;
  shape.n_kv_heads = Filled::kKvHeads;
  shape.page_tokens = Filled::kPageTokens;
  shape.key = side_for(f, c.d);
  shape.value = side_for(value_format_for(f), c.d);
  const int pages = (n_tokens + Filled::kPageTokens - 1) / Filled::kPageTokens;
  std::vector<int32_t> order(pages);
  std::iota(order.begin(), order.end(), 0);
  Rng shuffle(seed + 1);
  for (int i = pages - 1; i > 0; --i) std::swap(order[i], order[shuffle.below(static_cast<uint64_t>(i) + 1)]);
  c.cache = std::make_unique<DevicePagedKv>(shape, n_tokens, order);
  Rng rng(seed);
  const size_t per_token = static_cast<size_t>(Filled::kKvHeads) * c.d;
  c.k.resize(per_token * n_tokens);
  c.v.resize(c.k.size());
  for (float& e : c.k) e = static_cast<float>(rng.normal());
  for (float& e : c.v) e = static_cast<float>(rng.normal());
  for (int t = 0; t < n_tokens;) {
    const int n = std::min(n_tokens - t, 1 + (t * 13) % 37);
    c.cache->append(c.k.data() + t * per_token, c.v.data() + t * per_token, n);
    t += n;
  }
  return c;
}

TEST_P(GpuKv, AppendStoresTheCpuCodecBytesInPagedOrder) {
  const KvFormat f = GetParam();
  Filled c = fill(f, 83, 21);
  ASSERT_EQ(c.cache->length(), 83);
  std::vector<uint8_t> want(c.codec->group_bytes()), want_value(c.value_codec->group_bytes());
  for (int t = 0; t < c.n_tokens; ++t)
    for (int h = 0; h < Filled::kKvHeads; ++h) {
      const size_t at = (static_cast<size_t>(t) * Filled::kKvHeads + h) * c.d;
      c.codec->quantize_ref(c.k.data() + at, want.data());
      ASSERT_EQ(c.cache->key_row(t, h), want) << kv_format_name(f) << " key token " << t << " head " << h;
      c.value_codec->quantize_ref(c.v.data() + at, want_value.data());
      ASSERT_EQ(c.cache->value_row(t, h), want_value) << kv_format_name(f) << " value token " << t << " head " << h;
    }
  EXPECT_THROW(c.cache->append(c.k.data(), c.v.data(), 1), Error);  // full
}

// Float64 causal softmax attention over the CPU codec's dequantized rows: query i of n_q sits
// at position n_tokens - n_q + i; query head h reads KV head h / group.
std::vector<double> reference_attention(const Filled& c, const std::vector<float>& q, int n_heads, int n_q,
                                        double softmax_scale) {
  const int d = c.d, group = n_heads / Filled::kKvHeads;
  std::vector<float> k(c.k.size()), v(c.v.size());
  std::vector<uint8_t> row(c.codec->group_bytes()), value_row(c.value_codec->group_bytes());
  for (size_t r = 0; r < c.k.size() / d; ++r) {
    c.codec->quantize_ref(c.k.data() + r * d, row.data());
    c.codec->dequantize_ref(row.data(), k.data() + r * d);  // tq{b}: back in the original basis
    c.value_codec->quantize_ref(c.v.data() + r * d, value_row.data());
    c.value_codec->dequantize_ref(value_row.data(), v.data() + r * d);
  }
  std::vector<double> out(static_cast<size_t>(n_q) * n_heads * d, 0.0);
  for (int qi = 0; qi < n_q; ++qi) {
    const int visible = c.n_tokens - n_q + qi + 1;
    for (int h = 0; h < n_heads; ++h) {
      const int kvh = h / group;
      const float* qv = q.data() + (static_cast<size_t>(qi) * n_heads + h) * d;
      std::vector<double> s(visible);
      double max = -INFINITY;
      for (int t = 0; t < visible; ++t) {
        const float* kr = k.data() + (static_cast<size_t>(t) * Filled::kKvHeads + kvh) * d;
        double dot = 0.0;
        for (int i = 0; i < d; ++i) dot += static_cast<double>(qv[i]) * kr[i];
        s[t] = dot * softmax_scale;
        max = std::max(max, s[t]);
      }
      double sum = 0.0;
      for (int t = 0; t < visible; ++t) sum += s[t] = std::exp(s[t] - max);
      double* o = out.data() + (static_cast<size_t>(qi) * n_heads + h) * d;
      for (int t = 0; t < visible; ++t) {
        const float* vr = v.data() + (static_cast<size_t>(t) * Filled::kKvHeads + kvh) * d;
        for (int i = 0; i < d; ++i) o[i] += s[t] / sum * vr[i];
      }
    }
  }
  return out;
}

void expect_attention_matches(KvFormat f, int n_tokens, int n_q, int group) {
  Filled c = fill(f, n_tokens, 31 + n_q);
  const int n_heads = Filled::kKvHeads * group;
  Rng rng(41);
  std::vector<float> q(static_cast<size_t>(n_q) * n_heads * c.d);
  for (float& e : q) e = static_cast<float>(2.0 * rng.normal());  // peaked enough that the softmax matters
  const double softmax_scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  const std::vector<double> want = reference_attention(c, q, n_heads, n_q, softmax_scale);
  double energy = 0.0;
  for (double w : want) energy += w * w;
  ASSERT_GT(energy, 0.0);
  // 32-token splits (many partials, a ragged tail), 64, automatic, and one split over everything.
  for (int split : {32, 64, 0, 4096}) {
    std::vector<float> got(want.size(), NAN);  // poisoned: an unwritten element fails the NaN check
    c.cache->attention(n_heads, q.data(), n_q, static_cast<float>(softmax_scale), got.data(), split);
    double err = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << kv_format_name(f) << " split " << split << " element " << i;
      err += (got[i] - want[i]) * (got[i] - want[i]);
    }
    EXPECT_LT(err / energy, 1e-6) << kv_format_name(f) << " split " << split << " n_q " << n_q;
    std::vector<float> again(want.size(), NAN);
    c.cache->attention(n_heads, q.data(), n_q, static_cast<float>(softmax_scale), again.data(), split);
    EXPECT_EQ(0, std::memcmp(got.data(), again.data(), got.size() * sizeof(float))) << "not deterministic, split " << split;
  }
}

TEST_P(GpuKv, DecodeAttentionMatchesFloat64Reference) {
  expect_attention_matches(GetParam(), 301, 1, 4);  // GQA groups of 4 query heads
}

TEST_P(GpuKv, PrefillChunkIsCausalAndMatchesFloat64Reference) {
  expect_attention_matches(GetParam(), 301, 37, 3);  // 37 query positions x 3 heads = rows across blocks
}

INSTANTIATE_TEST_SUITE_P(GpuFormats, GpuKv, ::testing::ValuesIn(kAllKvFormats),
                         [](const ::testing::TestParamInfo<KvFormat>& info) { return std::string(kv_format_name(info.param)); });

}  // namespace
}  // namespace kvgate::kernels::gpu
