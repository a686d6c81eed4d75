#pragma once
// Host side of the GPU TurboQuant keys and rotated ggml rows: the codec constants (rotation signs,
// Lloyd-Max codebook) built exactly as the CPU codec builds them, so the GPU stores the CPU's bytes. C++17, so the
// GPU sources can include it too.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/format_id.h"
#include "kernels/gpu/kv_rows.h"

namespace kvgate::kernels {
struct FormatOptions;
}

namespace kvgate::kernels::gpu {

inline constexpr uint64_t kTqDefaultSeed = 0x6b76676174650001ull;  // FormatOptions::seed's default

// A TurboQuant codec's constants on the host: the TqParams the kernels read, whose matrix
// pointers (tqprod's sketch, rot=qr's Q) point into storage that every copy of this object shares.
struct TqConstants {
  TqParams params;
  std::shared_ptr<const std::vector<float>> sketch;           // tqprod: S, head_dim x head_dim row-major
  std::shared_ptr<const std::vector<float>> rotation_matrix;  // rot=qr: Q, head_dim x head_dim row-major
};

// The constants of tq{bits} at head_dim (Walsh-Hadamard rotation from `seed`; the first
// `outliers` rotated coordinates at bits + 1), or nullopt when the GPU kernels cannot store it:
// bits 1..4, outliers 0..head_dim and a power-of-two head_dim up to kTqMaxHeadDim.
std::optional<TqConstants> make_tq_params(int bits, int head_dim, bool norm_correction = false,
                                          uint64_t seed = kTqDefaultSeed, int outliers = 0);
// The same for a GPU TurboQuant format (tqprod{b} too) with a CPU format's options, as the CPU
// codec builds them: outlier channels default to the format's own, tqprod's sketch S and rot=qr's
// Q come from the seed (rot=qr takes any head_dim up to kTqMaxHeadDim). nullopt for options the
// CPU codec rejects or a head_dim the kernels lack.
std::optional<TqConstants> make_tq_params(FormatId format, int head_dim, const FormatOptions& options);
// The format at its default options.
std::optional<TqConstants> make_tq_params(FormatId format, int head_dim);

// The rotation of a ggml format with rot=hadamard (HadamardRotation(head_dim, seed)) or rot=wht
// (BlockWalshHadamard with the block kernels/hadamard.h's wht_rotation_block gives), or nullopt
// when the GPU kernels cannot store it: options other than the rotation (and its seed or block),
// a head_dim over kTqMaxHeadDim, a hadamard head_dim that is not a power of two, or a wht that
// llama.cpp would not apply at this head_dim (the caller stores such rows unrotated).
std::optional<RotationParams> make_rotation_params(int head_dim, const FormatOptions& options);

}  // namespace kvgate::kernels::gpu
