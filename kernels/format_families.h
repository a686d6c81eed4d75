#pragma once
// Each format family file contributes its registry entries through one function; kv_format.cc
// calls them in a fixed order, which is the order `kvgate kv list` shows (and FormatId's).
#include <vector>

#include "kernels/kv_format.h"

namespace kvgate::kernels {

void append_float_formats(std::vector<const FormatInfo*>& out);  // f32, f16, bf16
void append_fp8_formats(std::vector<const FormatInfo*>& out);              // fp8_e4m3, fp8_e5m2, fp8_e4m3fnuz
void append_per_token_head_formats(std::vector<const FormatInfo*>& out);  // int8_pth, fp8_pth, int4_pth
void append_ggml_formats(std::vector<const FormatInfo*>& out);            // q8_0, q5_0, q5_1, q4_0, q4_1, iq4_nl, mxfp4
void append_nvfp4_formats(std::vector<const FormatInfo*>& out);           // nvfp4, nvfp4_4over6, fp4_mx_block16
void append_uniform_formats(std::vector<const FormatInfo*>& out);         // u2, u3, u4, u8 (TurboQuant values)
void append_kivi_formats(std::vector<const FormatInfo*>& out);            // kivi2_k, kivi2_v, kivi4_k, kivi4_v
void append_turboquant_formats(std::vector<const FormatInfo*>& out);      // tq1..tq4, tq2.5, tq3.5, tqprod2..4

}  // namespace kvgate::kernels
