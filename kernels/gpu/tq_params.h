#pragma once
// Host side of the GPU TurboQuant keys: the codec constants (rotation signs, Lloyd-Max codebook)
// built exactly as the CPU codec builds them, so the GPU stores the CPU's bytes.
#include <optional>

#include "kernels/gpu/kv_rows.h"
#include "kernels/kv_format.h"

namespace kvgate::kernels::gpu {

// The constants of tq{bits} at head_dim with `options`, or nullopt when the GPU kernels cannot
// store that variant: only the Walsh-Hadamard rotation (the default), no outlier channels, and a
// power-of-two head_dim up to kTqMaxHeadDim; norm correction and the seed may be anything.
std::optional<TqParams> make_tq_params(int bits, int head_dim, const FormatOptions& options);

}  // namespace kvgate::kernels::gpu
