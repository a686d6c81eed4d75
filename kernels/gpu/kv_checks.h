#pragma once
// Host-side checks of what the GPU KV kernels are asked to store, against the format's registry
// entry (kernels/gpu/kv_formats.cc): gpu_kv.cu calls them before any launch, so every bad
// argument is a usage error naming the problem rather than wrong bytes.
#include <optional>
#include <string>

#include "kernels/gpu/gpu_kv.h"

namespace kvgate::kernels::gpu {

// A positive finite scale where the format takes one (the entry accepts scale=).
void check_kv_scale(FormatId format, float scale);
// Formats stored row by row without codec constants (not TurboQuant keys, not KIVI).
void check_plain_rows(FormatId format, const char* what);
// TurboQuant constants exactly when the format needs them, built for it at head_dim.
void check_tq_constants(FormatId format, int head_dim, const std::optional<TqConstants>& tq, const std::string& what);
// One side of a paged cache: its format, role, scale, constants, rotation, KIVI group and window.
void check_kv_side(const KvSideFormat& side, const PagedKvShape& shape, bool is_key);
// The cache's engine: one that has both formats (arithmetic_refusal), stored row by row.
void check_kv_arithmetic(const PagedKvShape& shape);

}  // namespace kvgate::kernels::gpu
