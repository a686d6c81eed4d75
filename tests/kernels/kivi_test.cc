#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/kv_config.h"
#include "kernels/kv_format.h"

namespace kvgate::kernels {
namespace {

// [n_tokens][d] Gaussian data with one outlier channel (x20), the structure KIVI targets in keys.
std::vector<float> make_keys(int n_tokens, int d, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n_tokens) * d);
  for (int t = 0; t < n_tokens; ++t)
    for (int c = 0; c < d; ++c) x[t * d + c] = static_cast<float>(rng.normal() * (c == 5 ? 20.0 : 1.0));
  return x;
}

double nmse(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    ref += static_cast<double>(x[i]) * x[i];
  }
  return err / ref;
}

// Largest error allowed for an asymmetric b-bit code over [lo, hi]: half a step, plus the fp16
// rounding of the stored min and scale (relative 2^-11 each, the scale multiplied by the code).
double error_bound(float lo, float hi, int bits) {
  const double levels = (1 << bits) - 1;
  const double step = (hi - lo) / levels;
  return 0.5 * step * (1 + 1e-3) + std::abs(lo) * 0x1p-11 + step * levels * 0x1p-10 + 1e-6;
}

TEST(Kivi, KeyLayoutAndWindow) {
  const auto k2 = make_codec("kivi2_k", 128);
  EXPECT_EQ(k2->token_group(), 32);
  EXPECT_EQ(k2->residual_tokens(), 128);
  EXPECT_EQ(k2->group_bytes(), 4u * 128 + 32 * 128 * 2 / 8);
  EXPECT_DOUBLE_EQ(k2->bits_per_element(), 3.0);  // 2 bits + 2 fp16 per channel per 32 tokens
  EXPECT_EQ(make_codec("kivi4_k", 64)->group_bytes(), 4u * 64 + 32 * 64 * 4 / 8);
  const auto v2 = make_codec("kivi2_v", 128);
  EXPECT_EQ(v2->token_group(), 1);
  EXPECT_EQ(v2->residual_tokens(), 128);
  EXPECT_EQ(v2->group_bytes(), 4u * 4 + 128 * 2 / 8);
  FormatOptions o;
  o.token_group = 64;
  o.residual_tokens = 0;
  const auto k64 = make_codec("kivi4_k", 128, o);
  EXPECT_EQ(k64->token_group(), 64);
  EXPECT_EQ(k64->residual_tokens(), 0);
  // Non-KIVI formats have no window.
  EXPECT_EQ(make_codec("f16", 128)->residual_tokens(), 0);
}

TEST(Kivi, KeyRoundTripWithinPerChannelBounds) {
  for (int bits : {2, 4}) {
    const int d = 64;
    const auto codec = make_codec("kivi" + std::to_string(bits) + "_k", d);
    const int g = codec->token_group();
    const std::vector<float> x = make_keys(g, d, 17 + bits);
    std::vector<uint8_t> buf(codec->group_bytes());
    std::vector<float> y(x.size());
    codec->quantize(x.data(), buf.data());
    codec->dequantize(buf.data(), y.data());
    for (int c = 0; c < d; ++c) {
      float lo = x[c], hi = x[c];
      for (int t = 0; t < g; ++t) lo = std::min(lo, x[t * d + c]), hi = std::max(hi, x[t * d + c]);
      const double bound = error_bound(lo, hi, bits);
      for (int t = 0; t < g; ++t)
        EXPECT_LE(std::abs(x[t * d + c] - y[t * d + c]), bound) << "bits " << bits << " c " << c << " t " << t;
    }
    // Per-channel ranges keep the outlier channel from spoiling the others.
    std::vector<float> x_rest, y_rest;
    for (int t = 0; t < g; ++t)
      for (int c = 0; c < d; ++c)
        if (c != 5) x_rest.push_back(x[t * d + c]), y_rest.push_back(y[t * d + c]);
    EXPECT_LT(nmse(x_rest, y_rest), bits == 4 ? 0.012 : 0.25) << bits;
  }
}

TEST(Kivi, ValueRoundTripWithinPerGroupBounds) {
  for (int bits : {2, 4}) {
    const int d = 128;
    const auto codec = make_codec("kivi" + std::to_string(bits) + "_v", d);
    Rng rng(3);
    std::vector<float> x(d), y(d);
    double err = 0.0, ref = 0.0;
    std::vector<uint8_t> buf(codec->group_bytes());
    for (int trial = 0; trial < 200; ++trial) {
      for (float& v : x) v = static_cast<float>(rng.normal() * 2.0 + 0.5);
      codec->quantize(x.data(), buf.data());
      codec->dequantize(buf.data(), y.data());
      for (int g = 0; g < d / 32; ++g) {
        const auto [lo, hi] = std::minmax_element(x.begin() + g * 32, x.begin() + (g + 1) * 32);
        const double bound = error_bound(*lo, *hi, bits);
        for (int c = g * 32; c < (g + 1) * 32; ++c) EXPECT_LE(std::abs(x[c] - y[c]), bound);
      }
      for (int c = 0; c < d; ++c) err += (x[c] - y[c]) * (x[c] - y[c]), ref += x[c] * x[c];
    }
    EXPECT_LT(err / ref, bits == 4 ? 0.01 : 0.2) << bits;
  }
}

TEST(Kivi, ConstantChannelIsExactUpToFp16) {
  const auto codec = make_codec("kivi2_k", 32);
  std::vector<float> x(32 * 32, 1.25f), y(32 * 32);
  std::vector<uint8_t> buf(codec->group_bytes());
  codec->quantize(x.data(), buf.data());
  codec->dequantize(buf.data(), y.data());
  for (float v : y) EXPECT_EQ(v, 1.25f);
}

TEST(Kivi, DotAndAxpyAgreeWithDequantize) {
  const int d = 64;
  const auto keys = make_codec("kivi4_k", d), values = make_codec("kivi2_v", d);
  const int g = keys->token_group();
  const std::vector<float> x = make_keys(g, d, 9);
  std::vector<uint8_t> kbuf(keys->group_bytes()), vbuf(values->group_bytes() * g);
  std::vector<float> kdq(x.size()), vdq(d);
  keys->quantize(x.data(), kbuf.data());
  keys->dequantize(kbuf.data(), kdq.data());
  Rng rng(1);
  std::vector<float> q(d);
  for (float& v : q) v = static_cast<float>(rng.normal());
  std::vector<float> scores(g);
  keys->dot_rows(q.data(), 1, kbuf.data(), g, scores.data());
  for (int t = 0; t < g; ++t) {
    double exact = 0.0;
    for (int c = 0; c < d; ++c) exact += static_cast<double>(q[c]) * kdq[t * d + c];
    EXPECT_NEAR(keys->dot_ref(q.data(), kbuf.data(), t), exact, 1e-3 * (1 + std::abs(exact)));
    EXPECT_NEAR(scores[t], exact, 1e-3 * (1 + std::abs(exact)));
  }
  std::vector<float> acc(d, 0.0f), expected(d, 0.0f);
  for (int t = 0; t < g; ++t) {
    values->quantize(x.data() + t * d, vbuf.data() + t * values->group_bytes());
    values->dequantize(vbuf.data() + t * values->group_bytes(), vdq.data());
    const float w = 1.0f / (t + 1);
    values->axpy_ref(w, vbuf.data() + t * values->group_bytes(), 0, acc.data());
    for (int c = 0; c < d; ++c) expected[c] += w * vdq[c];
  }
  for (int c = 0; c < d; ++c) EXPECT_NEAR(acc[c], expected[c], 1e-4 * (1 + std::abs(expected[c])));
}

TEST(Kivi, SpecsAndErrors) {
  const KvConfig c = parse_kv_config("kivi2");
  EXPECT_EQ(c.key.format, find_format("kivi2_k"));
  EXPECT_EQ(c.value.format, find_format("kivi2_v"));
  EXPECT_EQ(c.canonical(), "kivi2_k/kivi2_v");
  EXPECT_EQ(parse_kv_config("kivi4").canonical(), "kivi4_k/kivi4_v");
  const KvConfig w = parse_kv_config("kivi2_k:group=64:residual=0/kivi2_v:residual=32");
  EXPECT_EQ(w.canonical(), "kivi2_k:group=64:residual=0/kivi2_v:residual=32");
  EXPECT_EQ(parse_kv_config(w.canonical()), w);
  EXPECT_EQ(parse_kv_config("kivi2_k:group=32/kivi2_v"), c);
  // 3 bits per element for both sides at head_dim 128: the sizes the capacity simulator uses.
  EXPECT_DOUBLE_EQ(c.bits_per_element(KvShape{2, 2, 128}), 3.0);
  for (const char* bad : {"kivi2_v", "kivi2_k", "kivi2_v/kivi2_k", "kivi2_k:group=0/kivi2_v",
                          "kivi2_k/kivi2_v:group=64", "kivi2:residual=5", "kivi2_k:nc/kivi2_v"}) {
    SCOPED_TRACE(bad);
    try {
      const KvConfig cfg = parse_kv_config(bad);
      // Some errors need the head_dim: they surface when the codec is built.
      cfg.bytes_per_token(KvShape{1, 1, 128});
      ADD_FAILURE() << "expected a usage error";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
    }
  }
  try {
    make_codec("kivi2_v", 48);
    ADD_FAILURE() << "expected a usage error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvgate::kernels
