#include "kernels/orthogonal.h"

#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace kvgate::kernels {

OrthogonalRotation::OrthogonalRotation(int n, uint64_t seed) : n_(n), q_(static_cast<size_t>(n) * n) {
  KVGATE_CHECK(n > 0 && n <= 4096, "orthogonal rotation size out of range");
  const size_t N = static_cast<size_t>(n);
  // a: column-major n x n Gaussian matrix, overwritten by R (upper part) and Householder vectors.
  std::vector<double> a(N * N);
  Rng rng(seed);
  for (double& v : a) v = rng.normal();
  auto at = [&](size_t row, size_t col) -> double& { return a[col * N + row]; };
  std::vector<std::vector<double>> householder(N);
  std::vector<double> r_diag(N);
  for (size_t k = 0; k < N; ++k) {
    double norm2 = 0.0;
    for (size_t i = k; i < N; ++i) norm2 += at(i, k) * at(i, k);
    const double norm = std::sqrt(norm2);
    // Reflect column k onto -sign(a_kk) * norm * e_k, the choice that avoids cancellation.
    const double alpha = at(k, k) >= 0.0 ? -norm : norm;
    std::vector<double> v(N - k);
    for (size_t i = k; i < N; ++i) v[i - k] = at(i, k);
    v[0] -= alpha;
    double vnorm2 = 0.0;
    for (double x : v) vnorm2 += x * x;
    if (vnorm2 > 0.0) {
      for (size_t col = k; col < N; ++col) {
        double dot = 0.0;
        for (size_t i = k; i < N; ++i) dot += v[i - k] * at(i, col);
        const double f = 2.0 * dot / vnorm2;
        for (size_t i = k; i < N; ++i) at(i, col) -= f * v[i - k];
      }
    }
    r_diag[k] = at(k, k);
    householder[k] = std::move(v);
  }
  // Q = H_0 H_1 ... H_{n-1}; build it by applying the reflections to the identity in reverse.
  std::vector<double> q(N * N, 0.0);  // column-major
  for (size_t i = 0; i < N; ++i) q[i * N + i] = 1.0;
  for (size_t kk = N; kk-- > 0;) {
    const std::vector<double>& v = householder[kk];
    double vnorm2 = 0.0;
    for (double x : v) vnorm2 += x * x;
    if (vnorm2 == 0.0) continue;
    for (size_t col = 0; col < N; ++col) {
      double dot = 0.0;
      for (size_t i = kk; i < N; ++i) dot += v[i - kk] * q[col * N + i];
      const double f = 2.0 * dot / vnorm2;
      for (size_t i = kk; i < N; ++i) q[col * N + i] -= f * v[i - kk];
    }
  }
  for (size_t row = 0; row < N; ++row)
    for (size_t col = 0; col < N; ++col) {
      const double sign = r_diag[col] < 0.0 ? -1.0 : 1.0;
      q_[row * N + col] = static_cast<float>(q[col * N + row] * sign);
    }
}

void OrthogonalRotation::forward(const float* x, float* out) const {
  for (int row = 0; row < n_; ++row) {
    const float* q = q_.data() + static_cast<size_t>(row) * n_;
    double sum = 0.0;
    for (int col = 0; col < n_; ++col) sum += static_cast<double>(q[col]) * x[col];
    out[row] = static_cast<float>(sum);
  }
}

void OrthogonalRotation::inverse(const float* x, float* out) const {
  std::vector<double> acc(n_, 0.0);
  for (int row = 0; row < n_; ++row) {
    const float* q = q_.data() + static_cast<size_t>(row) * n_;
    for (int col = 0; col < n_; ++col) acc[col] += static_cast<double>(q[col]) * x[row];
  }
  for (int col = 0; col < n_; ++col) out[col] = static_cast<float>(acc[col]);
}

}  // namespace kvgate::kernels
