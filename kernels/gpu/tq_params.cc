#include "kernels/gpu/tq_params.h"

#include <cmath>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "kernels/hadamard.h"
#include "kernels/kv_format.h"
#include "kernels/lloyd_max.h"
#include "kernels/orthogonal.h"

namespace kvgate::kernels::gpu {

static_assert(kTqDefaultSeed == FormatOptions{}.seed, "the GPU default must be the CPU codec's default seed");

namespace {
constexpr uint64_t kQjlSeedSalt = 0x514a4c2d736b6574ull;  // kernels/formats_turboquant.cc's

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

// The constants with rot=qr's Q (qr) or the Walsh-Hadamard rotation, which needs a power of two.
std::optional<TqConstants> tq_constants(int bits, int head_dim, bool norm_correction, uint64_t seed, int outliers,
                                        bool qr) {
  if (bits < 1 || bits > 4 || head_dim < 1 || head_dim > kTqMaxHeadDim ||
      (!qr && (head_dim & (head_dim - 1)) != 0) || outliers < 0 || outliers > head_dim)
    return std::nullopt;
  TqConstants c;
  TqParams& p = c.params;
  p.bits = bits;
  p.outliers = outliers;
  p.norm_correction = norm_correction;
  if (qr) {
    auto matrix = std::make_shared<std::vector<float>>(OrthogonalRotation(head_dim, seed).matrix());
    p.rotation_matrix = matrix->data();
    c.rotation_matrix = std::move(matrix);
  } else {
    p.rotation_scale = hadamard_rotation(head_dim, seed, p.signs);
  }
  scaled_codebook(bits, head_dim, p.centroids, p.thresholds);
  if (outliers > 0) scaled_codebook(bits + 1, head_dim, p.outlier_centroids, p.outlier_thresholds);
  return c;
}
}  // namespace

std::optional<TqConstants> make_tq_params(int bits, int head_dim, bool norm_correction, uint64_t seed, int outliers) {
  return tq_constants(bits, head_dim, norm_correction, seed, outliers, false);
}

std::optional<TqConstants> make_tq_params(FormatId format, int head_dim, const FormatOptions& options) {
  FormatOptions codec_options;  // the options a TurboQuant codec takes (check_common_options)
  codec_options.rotation = options.rotation;
  codec_options.norm_correction = options.norm_correction;
  codec_options.seed = options.seed;
  codec_options.outlier_channels = options.outlier_channels;
  if (!is_tq(format) || options != codec_options) return std::nullopt;
  if (is_tqprod(format) && (options.norm_correction || options.outlier_channels != 0)) return std::nullopt;
  const FormatInfo* info = find_format(format);
  if (!info || head_dim % info->head_dim_multiple != 0) return std::nullopt;
  const int outliers = options.outlier_channels != 0 ? options.outlier_channels : tq_default_outliers(format, head_dim);
  // KeyRotation: rot=qr, else (none or hadamard) the Walsh-Hadamard rotation.
  std::optional<TqConstants> c = tq_constants(tq_bits(format), head_dim, options.norm_correction, options.seed,
                                              outliers, options.rotation == Rotation::qr);
  if (c && is_tqprod(format)) {
    // TurboQuantProdCodec's S and scale.
    auto sketch = std::make_shared<std::vector<float>>(static_cast<size_t>(head_dim) * head_dim);
    Rng rng(options.seed ^ kQjlSeedSalt);
    for (float& s : *sketch) s = static_cast<float>(rng.normal());
    c->params.sketch = sketch->data();
    c->params.qjl_scale = static_cast<float>(std::sqrt(M_PI / 2.0) / head_dim);
    c->sketch = std::move(sketch);
  }
  return c;
}

std::optional<TqConstants> make_tq_params(FormatId format, int head_dim) {
  return make_tq_params(format, head_dim, FormatOptions{});
}

std::optional<RotationParams> make_rotation_params(int head_dim, const FormatOptions& options) {
  if (head_dim < 1 || head_dim > kTqMaxHeadDim) return std::nullopt;
  if (options.rotation == Rotation::wht) {
    FormatOptions rotation_only;
    rotation_only.rotation = Rotation::wht;
    rotation_only.rotation_block = options.rotation_block;
    const int block = wht_rotation_block(head_dim, options.rotation_block);
    if (options != rotation_only || block == 0 || head_dim % block != 0) return std::nullopt;
    RotationParams r;
    r.block = block;
    r.scale = 1.0f / std::sqrt(static_cast<float>(block));
    return r;
  }
  FormatOptions rotation_only;
  rotation_only.rotation = Rotation::hadamard;
  rotation_only.seed = options.seed;
  if (options != rotation_only || (head_dim & (head_dim - 1)) != 0) return std::nullopt;
  RotationParams r;
  r.scale = hadamard_rotation(head_dim, options.seed, r.signs);
  return r;
}

}  // namespace kvgate::kernels::gpu
