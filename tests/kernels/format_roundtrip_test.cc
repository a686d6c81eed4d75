// The generic contract every registry entry must meet, checked for all of all_formats() (a new
// format is covered by adding it to the registry): round-trip error within a bound for its bit
// width, fast paths equal to the reference, attention-style dot/axpy consistent with the
// dequantized values, exact byte sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/kv_format.h"
#include "tests/kernels/gaussian.h"
#include "tests/kernels/toy_format.h"

namespace kvgate::kernels {
namespace {

constexpr uint8_t kCanary = 0xa5;

struct Case {
  const FormatInfo* info;
  int head_dim;
  FormatOptions options;
  std::string label;
};

// Every format at head dims 64 and 128, plus a Hadamard-rotated variant where the format takes one.
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const FormatInfo* f : all_formats()) {
    for (int hd : {64, 128}) {
      cases.push_back({f, hd, {}, std::string(f->name) + "/d" + std::to_string(hd)});
      FormatOptions rotated;
      rotated.rotation = Rotation::hadamard;
      try {
        make_codec(*f, hd, rotated);
        cases.push_back({f, hd, rotated, std::string(f->name) + ":rot=hadamard/d" + std::to_string(hd)});
      } catch (const Error&) {
        // The format does not take a rotation option.
      }
    }
  }
  return cases;
}

// NMSE of N(0,1) data any sound format must stay under at b stored bits per element (scales
// and norms included): 1.5 * 2^-(b-1). It is deliberately loose (a halving per bit, where
// scalar quantizers gain ~4x) so that every family fits, including inner-product-unbiased
// ones such as tqprod{b} that spend a bit on a QJL residual; it catches wrong scales, layouts
// and bases (NMSE ~1 or more). Tight per-format bounds live in each family's own tests.
double nmse_bound(double bits_per_element) { return 1.5 * std::exp2(-(bits_per_element - 1.0)); }

struct Encoded {
  std::unique_ptr<Codec> codec;
  int tokens;
  std::vector<float> x;         // [tokens][head_dim]
  std::vector<uint8_t> bytes;   // tokens / token_group groups, plus a canary tail
  std::vector<float> y;         // dequantize_ref, original basis
};

// groups: an odd count by default, and for g = 1 not a multiple of the 4-row tiles.
Encoded encode(const Case& c, uint64_t seed, int groups = 3) {
  Encoded e;
  e.codec = make_codec(*c.info, c.head_dim, c.options);
  const int g = e.codec->token_group();
  e.tokens = groups * g;
  const size_t gb = e.codec->group_bytes();
  const size_t group_floats = static_cast<size_t>(g) * c.head_dim;
  e.x = gaussian(static_cast<size_t>(e.tokens) * c.head_dim, seed);
  e.bytes.assign(groups * gb + 64, kCanary);
  e.y.resize(e.x.size());
  for (int k = 0; k < groups; ++k) {
    e.codec->quantize_ref(e.x.data() + k * group_floats, e.bytes.data() + k * gb);
    e.codec->dequantize_ref(e.bytes.data() + k * gb, e.y.data() + k * group_floats);
  }
  return e;
}

TEST(FormatRoundTrip, RegistryHasTheExpectedFamilies) {
  for (const char* name : {"f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "int8_pth", "fp8_pth",
                           "int4_pth", "q8_0", "q5_0", "q5_1", "q4_0", "q4_1", "iq4_nl", "mxfp4", "nvfp4", "u2", "u3",
                           "u4", "u8"})
    EXPECT_NE(find_format(name), nullptr) << name;
}

// Every test here runs every registered format, the ones added at run time too: the toy format
// of tests/kernels/toy_format.cc is covered by nothing but its registration.
TEST(FormatRoundTrip, CasesCoverEveryRegisteredFormat) {
  std::set<const FormatInfo*> covered;
  for (const Case& c : all_cases()) covered.insert(c.info);
  for (const FormatInfo* f : all_formats()) EXPECT_EQ(covered.count(f), 1u) << f->name;
  EXPECT_EQ(covered.count(&testing::toy_format()), 1u);
}

TEST(FormatRoundTrip, NmseWithinTheBitWidthBound) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.label);
    Encoded e = encode(c, 11);
    double err = 0.0, ref = 0.0;
    for (size_t i = 0; i < e.x.size(); ++i) {
      const double d = static_cast<double>(e.x[i]) - e.y[i];
      err += d * d;
      ref += static_cast<double>(e.x[i]) * e.x[i];
    }
    const double nmse = err / ref;
    EXPECT_LE(nmse, nmse_bound(e.codec->bits_per_element())) << "bits " << e.codec->bits_per_element();
    if (c.info->name != "f32") {
      EXPECT_GT(nmse, 0.0) << "only the f32 oracle is exact";
    }
  }
}

TEST(FormatRoundTrip, QuantizeWritesExactlyGroupBytes) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.label);
    Encoded e = encode(c, 12);
    const size_t used = 3 * e.codec->group_bytes();
    for (size_t i = used; i < e.bytes.size(); ++i) ASSERT_EQ(e.bytes[i], kCanary) << "wrote past group_bytes at " << i;
    EXPECT_NEAR(e.codec->bits_per_element(),
                8.0 * e.codec->group_bytes() / (double(e.codec->token_group()) * c.head_dim), 1e-12);
  }
}

// Nominal sizes from each format's definition (scales and minima included).
TEST(FormatRoundTrip, GroupBytesMatchTheFormatDefinitions) {
  const std::map<std::string, double> nominal_bits_d128 = {
      {"f32", 32},    {"f16", 16},     {"bf16", 16},       {"fp8_e4m3", 8},  {"fp8_e5m2", 8},
      {"fp8_e4m3fnuz", 8}, {"int8_pth", 8.25}, {"fp8_pth", 8.25}, {"int4_pth", 4.25}, {"q8_0", 8.5},
      {"q5_0", 5.5},  {"q5_1", 6},     {"q4_0", 4.5},      {"q4_1", 5},      {"iq4_nl", 4.5},
      {"mxfp4", 4.25}, {"nvfp4", 4.5}, {"fp4_mx_block16", 4.5}, {"u2", 2.25},    {"u3", 3.25},       {"u4", 4.25},     {"u8", 8.25}};
  for (const auto& [name, bits] : nominal_bits_d128) {
    auto codec = make_codec(name, 128);
    EXPECT_DOUBLE_EQ(codec->bits_per_element(), bits) << name;
  }
}

TEST(FormatRoundTrip, FastQuantizeAndDequantizeAreBitIdentical) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.label);
    Encoded e = encode(c, 13);
    const size_t gb = e.codec->group_bytes();
    const size_t group_floats = static_cast<size_t>(e.codec->token_group()) * c.head_dim;
    std::vector<uint8_t> fast(gb);
    std::vector<float> y_fast(group_floats);
    for (int k = 0; k < 3; ++k) {
      e.codec->quantize(e.x.data() + k * group_floats, fast.data());
      EXPECT_EQ(0, std::memcmp(fast.data(), e.bytes.data() + k * gb, gb)) << "group " << k;
      e.codec->dequantize(e.bytes.data() + k * gb, y_fast.data());
      EXPECT_EQ(0, std::memcmp(y_fast.data(), e.y.data() + k * group_floats, group_floats * sizeof(float)))
          << "group " << k;
    }
  }
}

double norm(const float* v, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(v[i]) * v[i];
  return std::sqrt(s);
}

// dot_ref on the prepared (possibly rotated) query equals q . dequantized key in the original
// basis, and dot_rows (the fused path) equals dot_ref, both up to float rounding.
TEST(FormatRoundTrip, DotMatchesDequantizedKeys) {
  for (const Case& c : all_cases()) {
    if (!c.info->for_keys) continue;
    SCOPED_TRACE(c.label);
    Encoded e = encode(c, 14);
    const int hd = c.head_dim, n_q = 3, g = e.codec->token_group();
    const std::vector<float> q = gaussian(static_cast<size_t>(n_q) * hd, 99);
    std::vector<float> qp(q.size());
    for (int qi = 0; qi < n_q; ++qi) e.codec->prepare_query(q.data() + qi * hd, qp.data() + qi * hd);
    std::vector<float> scores(static_cast<size_t>(n_q) * e.tokens, NAN);
    e.codec->dot_rows(qp.data(), n_q, e.bytes.data(), e.tokens, scores.data());
    for (int qi = 0; qi < n_q; ++qi) {
      for (int t = 0; t < e.tokens; ++t) {
        const float* k = e.y.data() + static_cast<size_t>(t) * hd;
        double exact = 0.0;
        for (int i = 0; i < hd; ++i) exact += static_cast<double>(q[qi * hd + i]) * k[i];
        const double scale = norm(q.data() + qi * hd, hd) * norm(k, hd);
        const uint8_t* group = e.bytes.data() + static_cast<size_t>(t / g) * e.codec->group_bytes();
        const float ref = e.codec->dot_ref(qp.data() + qi * hd, group, t % g);
        EXPECT_NEAR(ref, exact, 1e-5 * scale + 1e-6) << "q " << qi << " token " << t;
        EXPECT_NEAR(scores[static_cast<size_t>(qi) * e.tokens + t], ref, 1e-5 * scale + 1e-6)
            << "dot_rows, q " << qi << " token " << t;
      }
    }
  }
}

// axpy_rows equals repeated axpy_ref, and after finish_output the accumulator equals the
// weighted sum of dequantized values in the original basis.
TEST(FormatRoundTrip, AxpyMatchesDequantizedValues) {
  for (const Case& c : all_cases()) {
    if (!c.info->for_values) continue;
    SCOPED_TRACE(c.label);
    Encoded e = encode(c, 15);
    const int hd = c.head_dim, n_q = 2, g = e.codec->token_group();
    const std::vector<float> w = gaussian(static_cast<size_t>(n_q) * e.tokens, 77);
    std::vector<float> acc_fast(static_cast<size_t>(n_q) * hd, 0.0f), acc_ref = acc_fast;
    e.codec->axpy_rows(w.data(), n_q, e.bytes.data(), e.tokens, acc_fast.data());
    for (int t = 0; t < e.tokens; ++t)
      for (int qi = 0; qi < n_q; ++qi)
        e.codec->axpy_ref(w[static_cast<size_t>(qi) * e.tokens + t],
                          e.bytes.data() + static_cast<size_t>(t / g) * e.codec->group_bytes(), t % g,
                          acc_ref.data() + qi * hd);
    double wsum = 0.0;
    for (float v : w) wsum += std::fabs(v);
    double vmax = 0.0;
    for (float v : e.y) vmax = std::max(vmax, std::fabs(static_cast<double>(v)));
    const double tol = 1e-5 * wsum * vmax + 1e-6;
    for (size_t i = 0; i < acc_ref.size(); ++i) EXPECT_NEAR(acc_fast[i], acc_ref[i], tol) << "element " << i;
    for (int qi = 0; qi < n_q; ++qi) {
      e.codec->finish_output(acc_ref.data() + qi * hd);
      for (int i = 0; i < hd; ++i) {
        double exact = 0.0;
        for (int t = 0; t < e.tokens; ++t)
          exact += static_cast<double>(w[static_cast<size_t>(qi) * e.tokens + t]) * e.y[static_cast<size_t>(t) * hd + i];
        EXPECT_NEAR(acc_ref[qi * hd + i], exact, tol) << "q " << qi << " element " << i;
      }
    }
  }
}

// The fused paths are tiled four tokens at a time: every remainder must agree with dot_ref.
TEST(FormatRoundTrip, DotRowsHandlesEveryTokenCount) {
  for (const FormatInfo* f : all_formats()) {
    auto codec = make_codec(*f, 64);
    const int g = codec->token_group();
    if (g != 1 || !f->for_keys) continue;
    SCOPED_TRACE(std::string(f->name));
    const std::vector<float> x = gaussian(9 * 64, 5), q = gaussian(64, 6);
    std::vector<uint8_t> bytes(9 * codec->group_bytes());
    for (int t = 0; t < 9; ++t) codec->quantize(x.data() + t * 64, bytes.data() + t * codec->group_bytes());
    for (int n = 1; n <= 9; ++n) {
      std::vector<float> scores(n);
      codec->dot_rows(q.data(), 1, bytes.data(), n, scores.data());
      for (int t = 0; t < n; ++t)
        EXPECT_NEAR(scores[t], codec->dot_ref(q.data(), bytes.data() + t * codec->group_bytes(), 0),
                    1e-4 * (1 + std::fabs(scores[t])))
            << "n " << n << " token " << t;
    }
  }
}

// The fused paths decode a tile once for all query rows when a call has several (prefill chunks,
// GQA groups) and per query row otherwise; both must give the same bits, or a metric would
// depend on how many queries shared a call.
TEST(FormatRoundTrip, ManyQueryRowsEqualOneRowAtATimeBitForBit) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.label);
    Encoded e = encode(c, 16, 11);  // g = 1: two whole 4-row tiles and a remainder of 3
    const int hd = c.head_dim, n_q = 5;
    const size_t nt = static_cast<size_t>(e.tokens);
    if (c.info->for_keys) {
      const std::vector<float> q = gaussian(static_cast<size_t>(n_q) * hd, 21);
      std::vector<float> qp(q.size());
      for (int qi = 0; qi < n_q; ++qi) e.codec->prepare_query(q.data() + qi * hd, qp.data() + qi * hd);
      std::vector<float> together(n_q * nt, NAN), alone(n_q * nt, NAN);
      e.codec->dot_rows(qp.data(), n_q, e.bytes.data(), e.tokens, together.data());
      for (int qi = 0; qi < n_q; ++qi) e.codec->dot_rows(qp.data() + qi * hd, 1, e.bytes.data(), e.tokens, alone.data() + qi * nt);
      EXPECT_EQ(0, std::memcmp(together.data(), alone.data(), together.size() * sizeof(float))) << "dot_rows";
    }
    if (c.info->for_values) {
      const std::vector<float> w = gaussian(n_q * nt, 22);
      std::vector<float> together(static_cast<size_t>(n_q) * hd, 0.5f), alone = together;
      e.codec->axpy_rows(w.data(), n_q, e.bytes.data(), e.tokens, together.data());
      for (int qi = 0; qi < n_q; ++qi)
        e.codec->axpy_rows(w.data() + qi * nt, 1, e.bytes.data(), e.tokens, alone.data() + qi * hd);
      EXPECT_EQ(0, std::memcmp(together.data(), alone.data(), together.size() * sizeof(float))) << "axpy_rows";
    }
  }
}

// On a CPU with AVX-512, calls over several query rows take the pair drivers
// (kernels/simd_avx512_pairs.h); they must give the AVX2 drivers' bits for every format, for even
// and odd row counts (the odd row goes through AVX2) and token counts past the whole tiles, or a
// result would depend on the machine. 13 tokens take the dot's two-tile pass, a one-tile pass
// and a tail; head_dim 72 (where a format allows it) leaves an 8-element format an odd block
// after its 16-element decodes, and its axpy the 8-element layout.
TEST(FormatRoundTrip, Avx512PairsEqualAvx2BitForBit) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 (or KVGATE_DISABLE_AVX512 is set)";
  struct AllowAvx512Again {
    ~AllowAvx512Again() { set_avx512_allowed(true); }
  } restore;
  std::vector<Case> cases = all_cases();
  for (const FormatInfo* f : all_formats()) {
    try {
      make_codec(*f, 72);
      cases.push_back({f, 72, {}, std::string(f->name) + "/d72"});
    } catch (const Error&) {
      // The format's blocks do not divide 72.
    }
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    Encoded e = encode(c, 17, 13);
    const int hd = c.head_dim;
    const size_t nt = static_cast<size_t>(e.tokens);
    for (int n_q : {2, 3, 4, 5, 8, 48}) {
      SCOPED_TRACE("n_q " + std::to_string(n_q));
      if (c.info->for_keys) {
        const std::vector<float> q = gaussian(static_cast<size_t>(n_q) * hd, 23 + n_q);
        std::vector<float> qp(q.size());
        for (int qi = 0; qi < n_q; ++qi) e.codec->prepare_query(q.data() + qi * hd, qp.data() + qi * hd);
        std::vector<float> wide(n_q * nt, NAN), narrow(n_q * nt, NAN);
        set_avx512_allowed(true);
        e.codec->dot_rows(qp.data(), n_q, e.bytes.data(), e.tokens, wide.data());
        set_avx512_allowed(false);
        e.codec->dot_rows(qp.data(), n_q, e.bytes.data(), e.tokens, narrow.data());
        EXPECT_EQ(0, std::memcmp(wide.data(), narrow.data(), wide.size() * sizeof(float))) << "dot_rows";
      }
      if (c.info->for_values) {
        std::vector<float> w = gaussian(n_q * nt, 24 + n_q);
        w[1] = 0.0f;  // a masked key's weight
        std::vector<float> wide(static_cast<size_t>(n_q) * hd, 0.25f), narrow = wide;
        set_avx512_allowed(true);
        e.codec->axpy_rows(w.data(), n_q, e.bytes.data(), e.tokens, wide.data());
        set_avx512_allowed(false);
        e.codec->axpy_rows(w.data(), n_q, e.bytes.data(), e.tokens, narrow.data());
        EXPECT_EQ(0, std::memcmp(wide.data(), narrow.data(), wide.size() * sizeof(float))) << "axpy_rows";
      }
    }
  }
}

}  // namespace
}  // namespace kvgate::kernels
