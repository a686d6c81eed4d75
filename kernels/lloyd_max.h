#pragma once
// Lloyd–Max scalar quantizers for a Gaussian source, solved numerically (not tabulated): the
// TurboQuant key formats quantize the coordinates of a randomly rotated unit vector, which are
// close to N(0, 1/d), with the MSE-optimal codebook for that density.
#include <vector>

namespace kvgate::kernels {

struct LloydMaxCodebook {
  int bits = 0;
  // For the standard normal N(0, 1); scale by sigma for N(0, sigma^2). Ascending, size 2^bits.
  std::vector<double> centroids;
  // Decision boundaries between consecutive centroids (midpoints), size 2^bits - 1.
  std::vector<double> thresholds;
  double distortion = 0.0;  // E[(X - Q(X))^2] for X ~ N(0, 1)
  int iterations = 0;       // Lloyd iterations until the centroids moved less than 1e-13
};

// The codebook for `bits` in 1..6, solved on first use and cached; thread-safe.
const LloydMaxCodebook& gaussian_lloyd_max(int bits);

// Standard normal density, distribution function and the interval statistics the solver uses.
double normal_pdf(double x);
double normal_cdf(double x);
// P(a < X < b) and E[X | a < X < b] for X ~ N(0, 1); a may be -inf, b may be +inf.
double normal_interval_mass(double a, double b);
double normal_interval_mean(double a, double b);

}  // namespace kvgate::kernels
