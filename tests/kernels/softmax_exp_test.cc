// The CPU softmax's exponential (kernels/exp_poly.h): accurate to 1 ulp against exp in double,
// exact where softmax needs it (exp(0) = 1, exp(-inf) = 0), and the page path
// (simd::softmax_weights, AVX-512 and AVX2) bit for bit equal to the scalar one the rest of the
// host uses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/cpu_features.h"
#include "core/rng.h"
#include "kernels/exp_poly.h"
#include "kernels/simd_avx2.h"
#include "kernels/softmax_state.h"

namespace kvgate::kernels {
namespace {

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Runs body once with the CPU's widest path and, where that is AVX-512, once more through the
// AVX2 one: both must give exp_poly's bits.
template <class Body>
void for_each_vector_width(Body&& body) {
  body();
  if (!cpu_has_avx512()) return;
  struct AllowAvx512Again {
    ~AllowAvx512Again() { set_avx512_allowed(true); }
  } restore;
  set_avx512_allowed(false);
  SCOPED_TRACE("AVX2 path");
  body();
}

// |got - exp(x)| in units of the last place of float at exp(x) (2^-149 in the subnormal range).
double ulp_error(float x, float got) {
  const double want = std::exp(static_cast<double>(x));
  if (want > std::numeric_limits<float>::max()) return std::isinf(got) ? 0.0 : 1e9;
  const double ulp = want < std::numeric_limits<float>::min()
                         ? std::ldexp(1.0, -149)
                         : std::ldexp(1.0, std::ilogb(want) - 23);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

TEST(SoftmaxExp, WithinOneUlpOfExpOverTheWholeRange) {
  // Every 61st float from -0 down to below the underflow threshold, then up to the overflow one.
  double worst = 0.0;
  float worst_x = 0.0f;
  auto scan = [&](uint32_t first, uint32_t last) {
    for (uint32_t u = first; u <= last; u += 61) {
      const float x = from_bits(u);
      const double e = ulp_error(x, exp_poly(x));
      if (e > worst) {
        worst = e;
        worst_x = x;
      }
    }
  };
  scan(bits(-0.0f), bits(-110.0f));
  scan(0, bits(89.0f));
  EXPECT_LE(worst, 1.0) << "at x = " << worst_x;
}

TEST(SoftmaxExp, ExactWhereSoftmaxNeedsIt) {
  EXPECT_EQ(exp_poly(0.0f), 1.0f);  // the row's maximum weighs exactly 1
  EXPECT_EQ(exp_poly(-0.0f), 1.0f);
  EXPECT_EQ(bits(exp_poly(-INFINITY)), bits(0.0f));  // masked scores: +0
  EXPECT_EQ(bits(exp_poly(-104.0f)), bits(0.0f));
  EXPECT_EQ(bits(exp_poly(-1e30f)), bits(0.0f));
  EXPECT_GT(exp_poly(-103.0f), 0.0f);  // subnormal, not flushed
  EXPECT_EQ(exp_poly(89.0f), INFINITY);
  EXPECT_TRUE(std::isnan(exp_poly(std::numeric_limits<float>::quiet_NaN())));
  for (int k = -149; k <= 127; ++k) {  // exp(k ln 2) lands within an ulp of 2^k
    const float x = static_cast<float>(k * 0.69314718055994530942);
    EXPECT_LE(ulp_error(x, exp_poly(x)), 1.0) << "k " << k;
  }
}

TEST(SoftmaxExp, IsTheHostSoftmaxExp) {
  SoftmaxState st;
  st.max = 1.5f;
  for (float x : {-0.0f, -0.3f, -7.25f, -88.0f, -100.0f, -INFINITY}) {
    EXPECT_EQ(bits(softmax_exp(x)), bits(exp_poly(x))) << x;
    EXPECT_EQ(bits(st.weight(x + 1.5f)), bits(exp_poly((x + 1.5f) - 1.5f))) << x;
  }
}

TEST(SoftmaxWeights, EqualsTheScalarExpBitForBit) {
  for_each_vector_width([] {
    Rng rng(7);
    for (int n : {0, 1, 5, 8, 9, 16, 24, 31, 32, 33, 100}) {
      std::vector<float> scores(static_cast<size_t>(n));
      for (int t = 0; t < n; ++t) {
        // Softmax's range and its edges: ordinary scores, masked ones, underflow, the max itself.
        switch (t % 7) {
          case 0: scores[t] = -INFINITY; break;
          case 1: scores[t] = static_cast<float>(rng.normal() * 60.0 - 60.0); break;
          case 2: scores[t] = 3.0f; break;
          default: scores[t] = static_cast<float>(rng.normal() * 2.0);
        }
      }
      const float max = 3.0f;
      std::vector<float> weights(scores.size(), -1.0f);
      simd::softmax_weights(scores.data(), n, max, weights.data());
      for (int t = 0; t < n; ++t) {
        const float want = exp_poly(scores[t] - max);
        EXPECT_EQ(bits(weights[t]), bits(want)) << "n " << n << " t " << t << " score " << scores[t];
      }
      // In place, as the attention calls it.
      std::vector<float> in_place = scores;
      simd::softmax_weights(in_place.data(), n, max, in_place.data());
      EXPECT_EQ(in_place, weights);
    }
  });
}

TEST(SoftmaxWeights, VectorLanesEqualTheScalarExpOnEveryFloatPattern) {
  // A stride through all 2^32 bit patterns (NaNs and infinities included) against max 0.
  std::vector<float> x, w(64);
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65537) x.push_back(from_bits(static_cast<uint32_t>(u)));
  for_each_vector_width([&] {
    for (size_t b = 0; b + 64 <= x.size(); b += 64) {
      simd::softmax_weights(&x[b], 64, 0.0f, w.data());
      for (size_t i = 0; i < 64; ++i) {
        const float want = exp_poly(x[b + i]);
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(w[i])) << x[b + i];
        else EXPECT_EQ(bits(w[i]), bits(want)) << x[b + i];
      }
    }
  });
}

}  // namespace
}  // namespace kvgate::kernels
