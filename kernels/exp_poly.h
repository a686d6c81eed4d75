#pragma once
// The exponential of the CPU attention's softmax weights: one fixed sequence of correctly
// rounded operations (FMAs, one subtraction, two multiplications by powers of two), so the AVX2
// version (simd::softmax_weights, 8 lanes at a time) and this scalar one give the same bits on
// every x86-64 CPU, whatever libm the host has. libm's expf is neither vectorizable here nor
// guaranteed to round the same way everywhere.
//
// exp(x) = 2^n * e^r with n = round(x / ln 2) and r = x - n ln 2 in [-ln2/2, ln2/2] (Cody-Waite,
// ln 2 split in two so r is exact to the last bit before the second FMA); e^r = 1 + r (1 + r P(r))
// with a degree-5 minimax P; 2^n is applied as two exact power-of-two factors so results in
// the subnormal range round once. Within 1 ulp of exp over the whole float range; exp(-inf) = +0,
// exp(0) = 1 exactly, x below kExpPolyMin gives +0, above kExpPolyMax +inf, NaN stays NaN.
//
// Plain C++17 without intrinsics: kernels/softmax_state.h uses it as the host's softmax_exp.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kvgate::kernels {

inline constexpr float kExpPolyMin = -104.0f;  // exp(x) < 2^-150 below: rounds to +0
inline constexpr float kExpPolyMax = 89.0f;    // exp(x) > FLT_MAX above: +inf
inline constexpr float kExpPolyLog2e = 1.44269502162933349609375f;
inline constexpr float kExpPolyShifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
inline constexpr float kExpPolyLn2Hi = 0.693147182464599609375f;  // ln 2 rounded to float
inline constexpr float kExpPolyLn2Lo = -1.904654323148236e-09f;   // ln 2 - kExpPolyLn2Hi
// P(r), highest degree first, P(0) ~ 1/2.
inline constexpr float kExpPolyP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                       4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

inline uint32_t exp_poly_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float exp_poly_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Written operation for operation as simd::avx2::exp_ps; the clamps are max_ps/min_ps's
// `a > b ? a : b`, which keep a NaN x.
inline float exp_poly(float x) {
  x = kExpPolyMin > x ? kExpPolyMin : x;
  x = kExpPolyMax < x ? kExpPolyMax : x;
  const float t = std::fma(x, kExpPolyLog2e, kExpPolyShifter);
  const float n = t - kExpPolyShifter;
  float r = std::fma(n, -kExpPolyLn2Hi, x);
  r = std::fma(n, -kExpPolyLn2Lo, r);
  float p = kExpPolyP[0];
  for (int i = 1; i < 6; ++i) p = std::fma(p, r, kExpPolyP[i]);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  // n in [-150, 129] sits in t's low mantissa bits; 2^n = 2^n1 * 2^n2 with both factors normal.
  const int32_t ni = static_cast<int32_t>(exp_poly_bits(t) - exp_poly_bits(kExpPolyShifter));
  const int32_t n1 = ni >> 1;
  const int32_t n2 = ni - n1;
  const float s1 = exp_poly_float(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = exp_poly_float(static_cast<uint32_t>(n2 + 127) << 23);
  return (p * s1) * s2;
}

}  // namespace kvgate::kernels
