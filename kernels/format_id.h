#pragma once
// The id of every built-in KV format. The registry entry carries it (kernels/kv_format.h:
// FormatInfo::id), and it is the one key the SIMD dispatch (kernels/simd_avx2.cc) and the GPU
// kernels (kernels/gpu/kv_rows.h) switch on, so no list of formats is bridged by name. Plain
// C++17 without the standard library beyond <cstdint>, so the device compilers include it too.
#include <cstdint>

namespace kvgate::kernels {

// In the registry's order (`kvgate kv list`), which is also the order of the format families.
enum class FormatId : uint8_t {
  f32,
  f16,
  bf16,
  fp8_e4m3,
  fp8_e5m2,
  fp8_e4m3fnuz,
  int8_pth,
  fp8_pth,
  int4_pth,
  q8_0,
  q5_0,
  q5_1,
  q4_0,
  q4_1,
  iq4_nl,
  mxfp4,
  nvfp4,
  nvfp4_4over6,
  fp4_mx_block16,
  kivi2_k,
  kivi2_v,
  kivi4_k,
  kivi4_v,
  tq1,
  tq2,
  tq2_5,
  tq3,
  tq3_5,
  tq4,
  tqprod2,
  tqprod3,
  tqprod4,
  u2,
  u3,
  u4,
  u8,
  // A format added at run time (register_format): no SIMD or GPU kernel switches on it, so
  // several may share it; the registry tells them apart by their entries.
  external,
};

// How the GPU kernels keep a format (the registry entry's FormatInfo::gpu); what the host side of
// the GPU backend needs to set a cache side up (runtime/gpu_model.cc, kernels/gpu/gpu_kv.cu).
enum class GpuStorage : uint8_t {
  none,        // no GPU kernels: the format runs on the CPU only
  rows,        // one row per token, quantized on append (kernels/gpu/kv_rows.h)
  turboquant,  // rows that need the codec's constants (rotation, codebooks: kernels/gpu/tq_params.h)
  windowed,    // KIVI: an f16 window, then token groups quantized as they leave it
};

}  // namespace kvgate::kernels
