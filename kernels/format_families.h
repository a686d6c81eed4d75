#pragma once
// Each format family file contributes its registry entries through one function; kv_format.cc
// calls them in a fixed order, which is the order `kvgate kv list` shows.
#include <vector>

#include "kernels/kv_format.h"

namespace kvgate::kernels {

void append_float_formats(std::vector<const FormatInfo*>& out);  // f32, f16, bf16
void append_kivi_formats(std::vector<const FormatInfo*>& out);            // kivi2_k, kivi2_v, kivi4_k, kivi4_v
void append_turboquant_formats(std::vector<const FormatInfo*>& out);      // tq1..tq4, tq2.5, tq3.5, tqprod2..4

}  // namespace kvgate::kernels
