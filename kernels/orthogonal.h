#pragma once
// A seeded random orthogonal matrix, the alternative to the randomized Walsh–Hadamard rotation
// for TurboQuant (`rot=qr`): Q from the Householder QR factorization of a matrix of iid
// standard normals, with column signs fixed by sign(diag(R)) so that Q is Haar-distributed
// (uniform over the orthogonal group) rather than biased by the factorization's conventions.
// Works for any n, at O(n^2) per vector instead of O(n log n).
#include <cstdint>
#include <vector>

namespace kvgate::kernels {

class OrthogonalRotation {
 public:
  OrthogonalRotation() = default;
  OrthogonalRotation(int n, uint64_t seed);
  int size() const { return n_; }
  // out = Q x; out must not alias x.
  void forward(const float* x, float* out) const;
  // out = Q^T x; out must not alias x.
  void inverse(const float* x, float* out) const;
  // Q in row-major order, n*n entries.
  const std::vector<float>& matrix() const { return q_; }

 private:
  int n_ = 0;
  std::vector<float> q_;
};

}  // namespace kvgate::kernels
