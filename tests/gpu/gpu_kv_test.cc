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
#include "kernels/gpu/kv_tile.h"
#include "kernels/gpu/tq_params.h"
#include "kernels/kv_format.h"
#include "tests/kernels/gpu_row_cases.h"

namespace kvgate::kernels::gpu {
namespace {

using testing::head_dim_for;
using testing::probe_rows;
using testing::same_float;

// The CPU options of `f` in these tests: the test scale, and for `rotated` ggml blocks
// rot=hadamard at the default seed.
FormatOptions options_for(FormatId f, bool rotated) {
  FormatOptions options;
  options.scale = testing::tensor_scale_for(f);
  if (rotated) options.rotation = Rotation::hadamard;
  return options;
}
// The side of a cache storing `f` with the CPU `options`, with TurboQuant's constants or the
// rotation where it has them.
KvSideFormat side_for(FormatId f, int head_dim, const FormatOptions& options) {
  KvSideFormat side{f, options.scale, std::nullopt};
  if (is_tq(f)) side.tq = make_tq_params(f, head_dim, options);
  if (options.rotation == Rotation::hadamard) side.rotation = make_rotation_params(head_dim, options);
  return side;
}
// The key and value formats of the cache a test of `f` builds: TurboQuant keys store f16 values,
// KIVI keys and values pair with each other (same bits).
FormatId key_format_for(FormatId f) {
  if (f == FormatId::kivi2_v) return FormatId::kivi2_k;
  if (f == FormatId::kivi4_v) return FormatId::kivi4_k;
  return f;
}
FormatId value_format_for(FormatId f) {
  if (is_tq(f)) return FormatId::f16;
  if (f == FormatId::kivi2_k) return FormatId::kivi2_v;
  if (f == FormatId::kivi4_k) return FormatId::kivi4_v;
  return f;
}
float f16_round(float x) { return f16_to_f32(f32_to_f16(x)); }
// KIVI's default window and key group (kernels/formats_kivi.cc).
constexpr int kKiviResidual = 128;
int quantized_for(FormatId f, int n) {
  if (!is_kivi(f)) return n;
  const int group = is_kivi_key(f) ? kKiviDefaultGroup : 1;
  return n > kKiviResidual ? (n - kKiviResidual) / group * group : 0;
}

class GpuKv : public ::testing::TestWithParam<FormatId> {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no " << vendor() << " device present; GPU checks need one";
  }
};

// Runs without a device: shapes and scales are checked before any driver call.
TEST(GpuKvLayout, BadCacheShapesAndScalesAreUsageErrors) {
  PagedKvShape shape;
  shape.head_dim = 64;
  shape.n_kv_heads = 0;
  EXPECT_THROW(DevicePagedKv(shape, 16), Error);
  shape.n_kv_heads = 2;
  shape.key.format = FormatId::fp8_e4m3;
  shape.key.scale = 0.0f;
  EXPECT_THROW(DevicePagedKv(shape, 16), Error);
  shape.key.scale = 1.0f;
  shape.page_tokens = 8;
  EXPECT_THROW(DevicePagedKv(shape, 16, {0, 0}), Error);  // not a permutation
  EXPECT_THROW(DevicePagedKv(shape, 16, {0}), Error);     // too few pages
  float x = 1.0f;
  uint8_t code = 0;
  EXPECT_THROW(quantize_rows(FormatId::fp8_e4m3, 1, 0.0f, &x, 1, &code), Error);
  EXPECT_THROW(quantize_rows(FormatId::fp8_e5m2, 1, NAN, &x, 1, &code), Error);
  EXPECT_THROW(quantize_rows(FormatId::q8_0, 40, 1.0f, &x, 1, &code), Error);
  EXPECT_THROW(quantize_rows(FormatId::nvfp4, 16, 0.0f, &x, 1, &code), Error);  // nvfp4's global scale
  EXPECT_THROW(quantize_rows(FormatId::nvfp4, 16, INFINITY, &x, 1, &code), Error);
  shape.page_tokens = 16;
  shape.value.format = FormatId::nvfp4;
  shape.value.scale = -1.0f;
  EXPECT_THROW(DevicePagedKv(shape, 16), Error);
  shape.value = KvSideFormat{};
  FormatOptions rotated;
  rotated.rotation = Rotation::hadamard;
  shape.key = KvSideFormat{FormatId::f16, 1.0f, std::nullopt};
  shape.key.rotation = make_rotation_params(64, rotated);
  EXPECT_THROW(DevicePagedKv(shape, 16), Error);  // a rotation on a format that takes none
  shape.key.format = FormatId::q4_0;
  shape.head_dim = 96;
  EXPECT_THROW(DevicePagedKv(shape, 16), Error);  // rows of 96 cannot be Hadamard-rotated
  // TurboQuant constants are checked before any driver call too: usage errors (exit code 2), not
  // the environment error a missing device gives.
  auto usage_error = [](auto&& run) {
    try {
      run();
    } catch (const Error& e) {
      return e.exit_code() == 2;
    }
    return false;
  };
  shape.key = KvSideFormat{FormatId::tq3, 1.0f, make_tq_params(FormatId::tq3, 64)};
  EXPECT_TRUE(usage_error([&] { DevicePagedKv(shape, 16); }));  // nor TurboQuant keys without rot=qr
  FormatOptions qr;
  qr.rotation = Rotation::qr;
  shape.key.tq = make_tq_params(FormatId::tq3, 64, qr);
  EXPECT_TRUE(usage_error([&] { DevicePagedKv(shape, 16); }));  // a 64 x 64 Q for rows of 96
  shape.key = KvSideFormat{FormatId::tqprod3, 1.0f, make_tq_params(FormatId::tq3, 96, qr)};
  EXPECT_TRUE(usage_error([&] { DevicePagedKv(shape, 16); }));  // tqprod without its sketch
  EXPECT_TRUE(usage_error([&] { quantize_rows(FormatId::tq3, 64, 1.0f, &x, 1, &code); }));  // constants needed
  EXPECT_TRUE(usage_error([&] { quantize_rows(FormatId::tq3, 64, *make_tq_params(FormatId::tq2, 64), &x, 1, &code); }));
  EXPECT_TRUE(usage_error([&] { quantize_rows(FormatId::tqprod3, 64, *make_tq_params(FormatId::tq2, 64), &x, 1, &code); }));
  EXPECT_TRUE(usage_error([&] { dequantize_rows(FormatId::tq3, 96, *make_tq_params(FormatId::tq3, 64, qr), &code, 1, &x); }));
  EXPECT_TRUE(usage_error([&] { quantize_rows(FormatId::q8_0, 64, *make_tq_params(FormatId::tq3, 64), &x, 1, &code); }));
}

// Rows through the host API, against the CPU codec with `options` (TurboQuant keys: with their
// constants, decoded in the rotated basis as dequantize_stored_ref).
void expect_quantize_rows_match(FormatId f, int d, const FormatOptions& options) {
  const int n_rows = 37;
  const auto codec = make_codec(kv_format_name(f), d, options);
  const std::optional<TqConstants> tq = is_tq(f) ? make_tq_params(f, d, options) : std::nullopt;
  ASSERT_EQ(is_tq(f), tq.has_value());
  const size_t row = codec->group_bytes();
  const std::vector<float> x = probe_rows(d, n_rows, 11);
  std::vector<uint8_t> want(row * n_rows), got(row * n_rows, 0xAB);  // poisoned
  for (int r = 0; r < n_rows; ++r) codec->quantize_ref(x.data() + static_cast<size_t>(r) * d, want.data() + r * row);
  if (tq) quantize_rows(f, d, *tq, x.data(), n_rows, got.data());
  else quantize_rows(f, d, options.scale, x.data(), n_rows, got.data());
  for (size_t b = 0; b < want.size(); ++b)
    ASSERT_EQ(got[b], want[b]) << kv_format_name(f) << " row " << b / row << " byte " << b % row;
}

void expect_dequantize_rows_match(FormatId f, int d, const FormatOptions& options) {
  const int n_rows = 29;
  const auto codec = make_codec(kv_format_name(f), d, options);
  const std::optional<TqConstants> tq = is_tq(f) ? make_tq_params(f, d, options) : std::nullopt;
  ASSERT_EQ(is_tq(f), tq.has_value());
  const size_t row = codec->group_bytes();
  // Codes from real data, then rows of arbitrary bytes (any scale bits, NaN codes included).
  const std::vector<float> x = probe_rows(d, n_rows, 12);
  std::vector<uint8_t> codes(row * n_rows);
  for (int r = 0; r < n_rows; ++r) codec->quantize_ref(x.data() + static_cast<size_t>(r) * d, codes.data() + r * row);
  Rng rng(13);
  for (size_t b = row * (n_rows - 6); b < codes.size(); ++b) codes[b] = static_cast<uint8_t>(rng.below(256));
  std::vector<float> want(static_cast<size_t>(d) * n_rows), got(want.size(), -12345.0f);
  for (int r = 0; r < n_rows; ++r) {
    float* w = want.data() + static_cast<size_t>(r) * d;
    if (tq) codec->dequantize_stored_ref(codes.data() + r * row, w);
    else codec->dequantize_ref(codes.data() + r * row, w);
  }
  if (tq) dequantize_rows(f, d, *tq, codes.data(), n_rows, got.data());
  else dequantize_rows(f, d, options.scale, codes.data(), n_rows, got.data());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_TRUE(same_float(got[i], want[i])) << kv_format_name(f) << " row " << i / d << " element " << i % d << ": got "
                                             << got[i] << " want " << want[i];
}

TEST_P(GpuKv, QuantizeWritesTheCpuCodecBytes) {
  const FormatId f = GetParam();
  if (is_kivi(f)) GTEST_SKIP() << kv_format_name(f) << " is stored through DevicePagedKv only: AppendStoresTheCpuCodecBytesInPagedOrder covers it";
  expect_quantize_rows_match(f, head_dim_for(f), options_for(f, false));
}

TEST_P(GpuKv, DequantizeEqualsCpuCodecBitForBit) {
  const FormatId f = GetParam();
  if (is_kivi(f)) GTEST_SKIP() << kv_format_name(f) << " is stored through DevicePagedKv only: the attention tests decode it";
  expect_dequantize_rows_match(f, head_dim_for(f), options_for(f, false));
}

// A cache of 3 KV heads, pages (16 tokens, 32 for KIVI's groups) in a scrambled pool order,
// filled in chunks of odd sizes, plus the CPU's view of the same data: each token's K and V as
// the cache holds them (quantized and dequantized by the CPU codec; for KIVI, f16 in the window
// and groups quantized from it).
struct Filled {
  static constexpr int kKvHeads = 3;
  FormatId key_format{}, value_format{};
  int d = 0, n_tokens = 0, page_tokens = 16;
  std::unique_ptr<Codec> codec, value_codec;
  std::unique_ptr<DevicePagedKv> cache;
  std::vector<float> k, v;            // [n_tokens][kKvHeads][d] as appended
  std::vector<float> k_view, v_view;  // the same as the cache holds them
  float* at(std::vector<float>& x, int t, int h) const { return x.data() + (static_cast<size_t>(t) * kKvHeads + h) * d; }
};

// Rows [first, first + rows) of head h, f16-rounded, back to back (what a KIVI window holds).
std::vector<float> window_rows(Filled& c, std::vector<float>& x, int first, int rows, int h) {
  std::vector<float> out(static_cast<size_t>(rows) * c.d);
  for (int t = 0; t < rows; ++t)
    for (int i = 0; i < c.d; ++i) out[static_cast<size_t>(t) * c.d + i] = f16_round(c.at(x, first + t, h)[i]);
  return out;
}

// The CPU's view of one side (see Filled).
void cpu_view(Filled& c, FormatId f, const Codec& codec, std::vector<float>& x, std::vector<float>& view) {
  view.resize(x.size());
  const int q = quantized_for(f, c.n_tokens), group = codec.token_group();
  std::vector<uint8_t> bytes(codec.group_bytes());
  for (int h = 0; h < Filled::kKvHeads; ++h) {
    if (!is_kivi(f)) {
      for (int t = 0; t < c.n_tokens; ++t) {
        codec.quantize_ref(c.at(x, t, h), bytes.data());
        codec.dequantize_ref(bytes.data(), c.at(view, t, h));  // tq{b}: back in the original basis
      }
      continue;
    }
    std::vector<float> y(static_cast<size_t>(group) * c.d);
    for (int t = 0; t < q; t += group) {
      codec.quantize_ref(window_rows(c, x, t, group, h).data(), bytes.data());
      codec.dequantize_ref(bytes.data(), y.data());
      for (int r = 0; r < group; ++r) std::copy_n(y.data() + static_cast<size_t>(r) * c.d, c.d, c.at(view, t + r, h));
    }
    for (int t = q; t < c.n_tokens; ++t)
      for (int i = 0; i < c.d; ++i) c.at(view, t, h)[i] = f16_round(c.at(x, t, h)[i]);
  }
}

// rotated: ggml blocks with rot=hadamard on both sides, at a head_dim whose 1/sqrt is inexact.
// key_options: the key format's CPU options instead of the defaults (TurboQuant's options);
// head_dim: a head_dim other than the format's test size (0: that size).
// value: the value format instead of the one value_format_for pairs with f.
Filled fill(FormatId f, int n_tokens, uint64_t seed, bool rotated = false,
            const std::optional<FormatOptions>& key_options = std::nullopt, int head_dim = 0,
            std::optional<FormatId> value = std::nullopt) {
  Filled c;
  c.key_format = key_format_for(f);
  c.value_format = value ? *value : value_format_for(f);
  c.d = head_dim ? head_dim : rotated ? 128 : head_dim_for(f);
  c.n_tokens = n_tokens;
  c.page_tokens = is_kivi(f) ? 32 : 16;
  const FormatOptions key_opts = key_options ? *key_options : options_for(c.key_format, rotated);
  const FormatOptions value_opts = options_for(c.value_format, rotated);
  c.codec = make_codec(kv_format_name(c.key_format), c.d, key_opts);
  c.value_codec = make_codec(kv_format_name(c.value_format), c.d, value_opts);
  PagedKvShape shape;
  shape.head_dim = c.d;
  shape.n_kv_heads = Filled::kKvHeads;
  shape.page_tokens = c.page_tokens;
  shape.key = side_for(c.key_format, c.d, key_opts);
  shape.value = side_for(c.value_format, c.d, value_opts);
  const int pages = (n_tokens + c.page_tokens - 1) / c.page_tokens;
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
  cpu_view(c, c.key_format, *c.codec, c.k, c.k_view);
  cpu_view(c, c.value_format, *c.value_codec, c.v, c.v_view);
  return c;
}

// The bytes of every quantized unit equal the CPU codec's for the same input; KIVI tokens
// still in the window have no unit yet.
void expect_side_bytes(Filled& c, FormatId f, const Codec& codec, std::vector<float>& x, bool key) {
  const int q = quantized_for(f, c.n_tokens), group = codec.token_group();
  std::vector<uint8_t> want(codec.group_bytes());
  for (int h = 0; h < Filled::kKvHeads; ++h) {
    for (int t = 0; t < q; t += group) {
      codec.quantize_ref(is_kivi(f) ? window_rows(c, x, t, group, h).data() : c.at(x, t, h), want.data());
      ASSERT_EQ(key ? c.cache->key_row(t, h) : c.cache->value_row(t, h), want)
          << kv_format_name(f) << (key ? " key" : " value") << " token " << t << " head " << h;
    }
    if (q < c.n_tokens) {
      EXPECT_THROW(key ? c.cache->key_row(q, h) : c.cache->value_row(q, h), Error);
    }
  }
}

TEST_P(GpuKv, AppendStoresTheCpuCodecBytesInPagedOrder) {
  const FormatId f = GetParam();
  const int n = is_kivi(f) ? 301 : 83;  // KIVI: past the 128-token window, so groups are quantized
  Filled c = fill(f, n, 21);
  ASSERT_EQ(c.cache->length(), n);
  expect_side_bytes(c, c.key_format, *c.codec, c.k, true);
  expect_side_bytes(c, c.value_format, *c.value_codec, c.v, false);
  EXPECT_THROW(c.cache->append(c.k.data(), c.v.data(), 1), Error);  // full
}

// Float64 causal softmax attention over the CPU's view of the cache: query i of n_q sits at
// position n_tokens - n_q + i; query head h reads KV head h / group.
std::vector<double> reference_attention(Filled& c, const std::vector<float>& q, int n_heads, int n_q,
                                        double softmax_scale) {
  const int d = c.d, group = n_heads / Filled::kKvHeads;
  std::vector<double> out(static_cast<size_t>(n_q) * n_heads * d, 0.0);
  for (int qi = 0; qi < n_q; ++qi) {
    const int visible = c.n_tokens - n_q + qi + 1;
    for (int h = 0; h < n_heads; ++h) {
      const int kvh = h / group;
      const float* qv = q.data() + (static_cast<size_t>(qi) * n_heads + h) * d;
      std::vector<double> s(visible);
      double max = -INFINITY;
      for (int t = 0; t < visible; ++t) {
        const float* kr = c.at(c.k_view, t, kvh);
        double dot = 0.0;
        for (int i = 0; i < d; ++i) dot += static_cast<double>(qv[i]) * kr[i];
        s[t] = dot * softmax_scale;
        max = std::max(max, s[t]);
      }
      double sum = 0.0;
      for (int t = 0; t < visible; ++t) sum += s[t] = std::exp(s[t] - max);
      double* o = out.data() + (static_cast<size_t>(qi) * n_heads + h) * d;
      for (int t = 0; t < visible; ++t) {
        const float* vr = c.at(c.v_view, t, kvh);
        for (int i = 0; i < d; ++i) o[i] += s[t] / sum * vr[i];
      }
    }
  }
  return out;
}

void expect_attention_matches(FormatId f, int n_tokens, int n_q, int group, bool rotated = false,
                              const std::optional<FormatOptions>& key_options = std::nullopt, int head_dim = 0,
                              std::optional<FormatId> value = std::nullopt) {
  Filled c = fill(f, n_tokens, 31 + n_q, rotated, key_options, head_dim, value);
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

// Test names allow only letters, digits and '_': "tq3.5" -> "tq3_5".
std::string format_test_name(const ::testing::TestParamInfo<FormatId>& info) {
  std::string name = kv_format_name(info.param);
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(GpuFormats, GpuKv, ::testing::ValuesIn(kv_formats()),
                         format_test_name);

// Every key/value pair with a tile kernel (kernels/gpu/kv_tile.h) at every head_dim it has one
// for, by kind: decode steps of one and two query positions (two row blocks of the decode kernel),
// and prefill chunks of 37 positions x 3 heads (two row blocks of the prefill kernel) and of 100
// positions x 4 heads (7 row blocks, the last ragged), over 301 tokens (a ragged last tile and
// split), against float64, bit-identical run to run at every split length; each call checked to
// run the tile kernel it is meant to (no silent fallback to the general kernel).
struct TilePairCase {
  KvPair pair;
  int head_dim;
  KernelKinds kind;
};
void PrintTo(const TilePairCase& c, std::ostream* os) {
  *os << kv_format_name(c.pair.key) << "/" << kv_format_name(c.pair.value) << " d" << c.head_dim
      << (c.kind == kPrefillKernel ? " prefill" : " decode");
}
std::vector<TilePairCase> tile_pair_cases() {
  std::vector<TilePairCase> out;
  for (KernelKinds kind : {kDecodeKernel, kPrefillKernel})
    for (const KvPair& p : kKernelPairs)
      for (const KernelHeadDim& d : kKernelHeadDims)
        if (has_kernel(kind, p.key, p.value, d.head_dim)) out.push_back({p, d.head_dim, kind});
  return out;
}
class GpuKvTilePairs : public ::testing::TestWithParam<TilePairCase> {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no " << vendor() << " device present; GPU checks need one";
  }
};
TEST_P(GpuKvTilePairs, MatchFloat64ReferenceOnTheirTileKernel) {
  const TilePairCase& c = GetParam();
  const bool prefill = c.kind == kPrefillKernel;
  const char* want = prefill ? "tile-prefill" : "tile-decode";
  {
    Filled probe = fill(c.pair.key, 1, 1, false, std::nullopt, c.head_dim, c.pair.value);
    const int kv = Filled::kKvHeads;
    EXPECT_STREQ(probe.cache->attention_kernel(kv * (prefill ? 3 : 4), prefill ? 37 : 1), want);
    EXPECT_STREQ(probe.cache->attention_kernel(kv * 4, prefill ? 100 : 2), want);
  }
  expect_attention_matches(c.pair.key, 301, prefill ? 37 : 1, prefill ? 3 : 4, false, std::nullopt, c.head_dim,
                           c.pair.value);
  expect_attention_matches(c.pair.key, 301, prefill ? 100 : 2, 4, false, std::nullopt, c.head_dim, c.pair.value);
}
INSTANTIATE_TEST_SUITE_P(TileKernels, GpuKvTilePairs, ::testing::ValuesIn(tile_pair_cases()),
                         [](const ::testing::TestParamInfo<TilePairCase>& info) {
                           std::string name = std::string(kv_format_name(info.param.pair.key)) + "_" +
                                              kv_format_name(info.param.pair.value) + "_d" +
                                              std::to_string(info.param.head_dim) +
                                              (info.param.kind == kPrefillKernel ? "_prefill" : "_decode");
                           std::replace(name.begin(), name.end(), '.', '_');
                           return name;
                         });

// ggml blocks with rot=hadamard: the cache stores the CPU codec's rotated bytes, attention
// rotates the query against the keys and its output back from the values' basis.
class GpuKvRotated : public GpuKv {};

TEST_P(GpuKvRotated, AppendStoresTheCpuCodecBytes) {
  Filled c = fill(GetParam(), 83, 21, true);
  expect_side_bytes(c, c.key_format, *c.codec, c.k, true);
  expect_side_bytes(c, c.value_format, *c.value_codec, c.v, false);
}

TEST_P(GpuKvRotated, DecodeAndPrefillAttentionMatchFloat64Reference) {
  expect_attention_matches(GetParam(), 301, 1, 4, true);
  expect_attention_matches(GetParam(), 301, 37, 3, true);
}

std::vector<FormatId> ggml_formats() {
  std::vector<FormatId> out;
  for (FormatId f : kv_formats())
    if (find_format(f)->accepts(kOptionRotation)) out.push_back(f);
  return out;
}
INSTANTIATE_TEST_SUITE_P(GgmlFormats, GpuKvRotated, ::testing::ValuesIn(ggml_formats()),
                         format_test_name);

// TurboQuant keys with the options the GPU backend accepts besides the defaults: norm
// correction, another seed, outlier channel counts whose codes end inside a byte, and rot=qr
// (also at head_dims that are not a power of two).
struct TqCase {
  FormatId format;
  FormatOptions options;
  const char* label;
  int head_dim = 0;  // 0: the format's test size
};
void PrintTo(const TqCase& c, std::ostream* os) { *os << c.label; }
std::vector<TqCase> tq_cases() {
  std::vector<TqCase> out;
  FormatOptions o;
  o.outlier_channels = 5;
  o.norm_correction = true;
  out.push_back({FormatId::tq3, o, "tq3_nc_outliers5"});
  o = FormatOptions{};
  o.outlier_channels = 3;
  o.seed = 7;
  out.push_back({FormatId::tq2_5, o, "tq2_5_seed7_outliers3"});
  o = FormatOptions{};
  o.norm_correction = true;
  out.push_back({FormatId::tq3_5, o, "tq3_5_nc"});
  o = FormatOptions{};
  o.outlier_channels = 64;
  out.push_back({FormatId::tq4, o, "tq4_all_outliers"});
  o = FormatOptions{};
  o.seed = 7;
  out.push_back({FormatId::tqprod3, o, "tqprod3_seed7"});
  o = FormatOptions{};
  o.rotation = Rotation::qr;
  out.push_back({FormatId::tq3, o, "tq3_qr"});
  out.push_back({FormatId::tq2_5, o, "tq2_5_qr_d80", 80});
  o.seed = 5;
  out.push_back({FormatId::tqprod3, o, "tqprod3_qr_seed5_d67", 67});  // spans past head_dim in attention
  return out;
}

class GpuKvTurboQuant : public ::testing::TestWithParam<TqCase> {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no " << vendor() << " device present; GPU checks need one";
  }
};

TEST_P(GpuKvTurboQuant, AppendStoresTheCpuCodecBytes) {
  Filled c = fill(GetParam().format, 83, 21, false, GetParam().options, GetParam().head_dim);
  ASSERT_EQ(c.cache->kv_bytes_per_token(), (c.codec->group_bytes() + c.value_codec->group_bytes()) * Filled::kKvHeads);
  expect_side_bytes(c, c.key_format, *c.codec, c.k, true);
  expect_side_bytes(c, c.value_format, *c.value_codec, c.v, false);
}

TEST_P(GpuKvTurboQuant, QuantizeAndDequantizeRowsEqualTheCpuCodec) {
  const TqCase& c = GetParam();
  const int d = c.head_dim ? c.head_dim : head_dim_for(c.format);
  expect_quantize_rows_match(c.format, d, c.options);
  expect_dequantize_rows_match(c.format, d, c.options);
}

TEST_P(GpuKvTurboQuant, DecodeAndPrefillAttentionMatchFloat64Reference) {
  expect_attention_matches(GetParam().format, 301, 1, 4, false, GetParam().options, GetParam().head_dim);
  expect_attention_matches(GetParam().format, 301, 37, 3, false, GetParam().options, GetParam().head_dim);
}

INSTANTIATE_TEST_SUITE_P(TurboQuantOptions, GpuKvTurboQuant, ::testing::ValuesIn(tq_cases()),
                         [](const ::testing::TestParamInfo<TqCase>& info) { return std::string(info.param.label); });

}  // namespace
}  // namespace kvgate::kernels::gpu
