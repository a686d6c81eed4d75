#pragma once
// Model weights on the GPU stay in their stored GGUF type, as on the CPU (runtime/weights.h):
// the GEMV and GEMM kernels decode each element as they load it. This header is the element
// decode, written once for the device and the host: tests/runtime/gpu_weight_blocks_test.cc
// runs it on the host and checks every element bit for bit against the CPU runtime's
// dequantize_weight_row, so the device multiplies by exactly the weights the CPU multiplies by.
// Operations and their order mirror the CPU decoders; no contraction into FMA happens because
// the GPU library builds with --fmad=false (nvcc) and -ffp-contract=off (HIP), as kernels/ does.
#include <cstddef>
#include <cstdint>

#include "core/float_convert.h"
#include "core/host_device.h"

namespace kvgate::kernels::gpu {

// The weight types the GPU forward multiplies with: the CPU runtime's (weight_type_supported).
enum class WeightType : uint8_t { f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q6_k };

// Elements and bytes per ggml block (1 element for the plain float types).
KVGATE_HD int weight_block_elems(WeightType t) {
  return t == WeightType::q4_k || t == WeightType::q6_k ? 256
         : t == WeightType::f32 || t == WeightType::f16 || t == WeightType::bf16 ? 1
                                                                                   : 32;
}
KVGATE_HD int weight_block_bytes(WeightType t) {
  switch (t) {
    case WeightType::f32: return 4;
    case WeightType::f16:
    case WeightType::bf16: return 2;
    case WeightType::q4_0: return 18;
    case WeightType::q4_1: return 20;
    case WeightType::q5_0: return 22;
    case WeightType::q5_1: return 24;
    case WeightType::q8_0: return 34;
    case WeightType::q4_k: return 144;
    case WeightType::q6_k: return 210;
  }
  return 0;
}

namespace weight_detail {

KVGATE_HD uint32_t u16_at(const uint8_t* p) { return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8); }
KVGATE_HD uint32_t u32_at(const uint8_t* p) { return u16_at(p) | (u16_at(p + 2) << 16); }
KVGATE_HD float half_at(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(u16_at(p))); }

// Nibble j (0..31) of a 16-byte ggml quant array: low nibbles hold elements 0..15.
KVGATE_HD int nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4; }
// The 5th bit of element j of a q5 block is bit j of qh.
KVGATE_HD int q5_high(uint32_t qh, int j) { return static_cast<int>((qh >> j) & 1u) << 4; }

KVGATE_HD void q4k_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Element j (0..255) of a block_q4_K: 4 runs of 64, each 32 low nibbles then 32 high ones.
KVGATE_HD float q4_k_element(const uint8_t* b, int j) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const int run = j / 64, within = j % 64;
  int sc, m;
  q4k_scale_min(2 * run + (within >= 32 ? 1 : 0), b + 4, sc, m);
  const uint8_t q = b[16 + 32 * run + within % 32];
  const int code = within < 32 ? q & 0x0f : q >> 4;
  const float scale = d * static_cast<float>(sc), offset = dmin * static_cast<float>(m);
  return scale * static_cast<float>(code) - offset;
}

// Element j (0..255) of a block_q6_K: two halves of 128, each four runs of 32 sharing ql/qh.
KVGATE_HD float q6_k_element(const uint8_t* b, int j) {
  const int half = j / 128, run = (j % 128) / 32, l = j % 32;
  const uint8_t* ql = b + 64 * half;
  const uint8_t* qh = b + 128 + 32 * half;
  const int8_t scale = static_cast<int8_t>(b[192 + 8 * half + l / 16 + 2 * run]);
  const int low = run == 0 ? ql[l] & 0x0f : run == 1 ? ql[l + 32] & 0x0f : run == 2 ? ql[l] >> 4 : ql[l + 32] >> 4;
  const int code = (low | (((qh[l] >> (2 * run)) & 3) << 4)) - 32;
  return half_at(b + 208) * static_cast<float>(scale) * static_cast<float>(code);
}

}  // namespace weight_detail

// Element i of a weight row stored as `t` (row: the row's first byte).
KVGATE_HD float weight_element(WeightType t, const uint8_t* row, int64_t i) {
  using namespace weight_detail;
  const int elems = weight_block_elems(t);
  const uint8_t* b = row + static_cast<size_t>(i / elems) * static_cast<size_t>(weight_block_bytes(t));
  const int j = static_cast<int>(i % elems);
  switch (t) {
    case WeightType::f32: return f32_from_bits(u32_at(b));
    case WeightType::f16: return half_at(b);
    case WeightType::bf16: return bf16_to_f32(static_cast<uint16_t>(u16_at(b)));
    case WeightType::q4_0: return static_cast<float>(nibble(b + 2, j) - 8) * half_at(b);
    case WeightType::q4_1: return static_cast<float>(nibble(b + 4, j)) * half_at(b) + half_at(b + 2);
    case WeightType::q5_0: return static_cast<float>((nibble(b + 6, j) | q5_high(u32_at(b + 2), j)) - 16) * half_at(b);
    case WeightType::q5_1:
      return static_cast<float>(nibble(b + 8, j) | q5_high(u32_at(b + 4), j)) * half_at(b) + half_at(b + 2);
    case WeightType::q8_0: return static_cast<float>(static_cast<int8_t>(b[2 + j])) * half_at(b);
    case WeightType::q4_k: return q4_k_element(b, j);
    case WeightType::q6_k: return q6_k_element(b, j);
  }
  return 0.0f;
}

}  // namespace kvgate::kernels::gpu
