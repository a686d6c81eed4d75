#pragma once
// Each format family file contributes its registry entries through one function; kv_format.cc
// calls them in a fixed order, which is the order `kvgate kv list` shows.
#include <vector>

#include "kernels/kv_format.h"

namespace kvgate::kernels {

void append_float_formats(std::vector<const FormatInfo*>& out);  // f32, f16, bf16

}  // namespace kvgate::kernels
