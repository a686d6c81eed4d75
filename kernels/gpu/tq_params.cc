#include "kernels/gpu/tq_params.h"

#include <cmath>

#include "core/rng.h"
#include "kernels/kv_format.h"
#include "kernels/lloyd_max.h"

namespace kvgate::kernels::gpu {

static_assert(kTqDefaultSeed == FormatOptions{}.seed, "the GPU default must be the CPU codec's default seed");

namespace {
// HadamardRotation(head_dim, seed): one sign per coordinate from the seed's stream; returns the
// scale 1/sqrt(head_dim) as it computes it.
float hadamard_rotation(int head_dim, uint64_t seed, float* signs) {
  Rng rng(seed);
  for (int i = 0; i < head_dim; ++i) signs[i] = (rng.next_u64() >> 63) ? -1.0f : 1.0f;
  return 1.0f / std::sqrt(static_cast<float>(head_dim));
}

// ScaledCodebook(bits, head_dim): the N(0, 1) solution scaled by 1/sqrt(head_dim), in float.
void scaled_codebook(int bits, int head_dim, float* centroids, float* thresholds) {
  const LloydMaxCodebook& cb = gaussian_lloyd_max(bits);
  const double sigma = 1.0 / std::sqrt(static_cast<double>(head_dim));
  for (size_t i = 0; i < cb.centroids.size(); ++i) centroids[i] = static_cast<float>(cb.centroids[i] * sigma);
  for (size_t i = 0; i < cb.thresholds.size(); ++i) thresholds[i] = static_cast<float>(cb.thresholds[i] * sigma);
}
}  // namespace

std::optional<TqParams> make_tq_params(int bits, int head_dim, bool norm_correction, uint64_t seed, int outliers) {
  if (bits < 1 || bits > 4 || head_dim < 1 || head_dim > kTqMaxHeadDim || (head_dim & (head_dim - 1)) != 0 ||
      outliers < 0 || outliers > head_dim)
    return std::nullopt;
  TqParams p;
  p.bits = bits;
  p.outliers = outliers;
  p.norm_correction = norm_correction;
  p.rotation_scale = hadamard_rotation(head_dim, seed, p.signs);
  scaled_codebook(bits, head_dim, p.centroids, p.thresholds);
  if (outliers > 0) scaled_codebook(bits + 1, head_dim, p.outlier_centroids, p.outlier_thresholds);
  return p;
}

std::optional<TqParams> make_tq_params(KvFormat format, int head_dim, const FormatOptions& options) {
  if (!is_tq(format) || options.rotation == Rotation::qr) return std::nullopt;
  const int outliers = options.outlier_channels != 0 ? options.outlier_channels : tq_default_outliers(format, head_dim);
  return make_tq_params(tq_bits(format), head_dim, options.norm_correction, options.seed, outliers);
}

std::optional<RotationParams> make_rotation_params(int head_dim, const FormatOptions& options) {
  FormatOptions rotation_only;
  rotation_only.rotation = Rotation::hadamard;
  rotation_only.seed = options.seed;
  if (options != rotation_only || head_dim < 1 || head_dim > kTqMaxHeadDim || (head_dim & (head_dim - 1)) != 0)
    return std::nullopt;
  RotationParams r;
  r.scale = hadamard_rotation(head_dim, options.seed, r.signs);
  return r;
}

}  // namespace kvgate::kernels::gpu
