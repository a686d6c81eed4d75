#pragma once
// The per-row arithmetic of the GPU KV formats, written once for the device and the host.
//
// gpu_kv.cu runs these functions on the device; tests/kernels/gpu_rows_test.cc runs the very
// same functions on the host and checks them byte for byte against the CPU codecs
// (kernels/formats_*.cc), so bit-identical quantization is tested even on a machine without a
// GPU. What keeps the two compilations equal: every multiply, add and divide goes through rn_*
// below (correctly rounded on the device, plain operators in host code built with
// -ffp-contract=off, as kernels/ is), the conversions are core/float_convert.h's, and float to
// int8 casts reproduce what the x86-64 build of the CPU reference does.
//
// A row is one token of one KV head (head_dim elements) in the CPU codec's byte layout.
#include <cfloat>
#include <climits>
#include <cstddef>
#include <cstdint>

#include "core/float_convert.h"
#include "core/host_device.h"

namespace kvgate::kernels::gpu {

// The formats with GPU kernels; names equal the CPU registry's (kernels::find_format).
enum class KvFormat : uint8_t {
  int8_pth,
  fp8_pth,
  q8_0,
  q4_0,
  q4_1,
  fp8_e4m3,
  f16,
  bf16,
  fp8_e5m2,
  fp8_e4m3fnuz,
  int4_pth,
  u2,
  u3,
  u4,
  u8,
  tq1,
  tq2,
  tq3,
  tq4,
  kivi2_k,
  kivi4_k,
  kivi2_v,
  kivi4_v,
  f32,
  q5_0,
  q5_1,
  iq4_nl,
  nvfp4,
  tq2_5,
  tq3_5,
  tqprod2,
  tqprod3,
  tqprod4,
};
inline constexpr KvFormat kAllKvFormats[] = {
    KvFormat::f16,      KvFormat::bf16,     KvFormat::fp8_e4m3, KvFormat::fp8_e5m2, KvFormat::fp8_e4m3fnuz,
    KvFormat::int8_pth, KvFormat::fp8_pth,  KvFormat::int4_pth, KvFormat::q8_0,     KvFormat::q5_0,
    KvFormat::q5_1,     KvFormat::q4_0,     KvFormat::q4_1,     KvFormat::iq4_nl,   KvFormat::nvfp4,
    KvFormat::u2,       KvFormat::u3,       KvFormat::u4,       KvFormat::u8,       KvFormat::tq1,
    KvFormat::tq2,      KvFormat::tq2_5,    KvFormat::tq3,      KvFormat::tq3_5,    KvFormat::tq4,
    KvFormat::tqprod2,  KvFormat::tqprod3,  KvFormat::tqprod4,  KvFormat::kivi2_k,  KvFormat::kivi4_k,  KvFormat::kivi2_v,  KvFormat::kivi4_v,  KvFormat::f32,
};

// The CPU registry's name of each format ("?" for a value outside the enum).
KVGATE_HD const char* format_name(KvFormat f) {
  switch (f) {
    case KvFormat::int8_pth: return "int8_pth";
    case KvFormat::fp8_pth: return "fp8_pth";
    case KvFormat::q8_0: return "q8_0";
    case KvFormat::q4_0: return "q4_0";
    case KvFormat::q4_1: return "q4_1";
    case KvFormat::fp8_e4m3: return "fp8_e4m3";
    case KvFormat::f16: return "f16";
    case KvFormat::bf16: return "bf16";
    case KvFormat::fp8_e5m2: return "fp8_e5m2";
    case KvFormat::fp8_e4m3fnuz: return "fp8_e4m3fnuz";
    case KvFormat::int4_pth: return "int4_pth";
    case KvFormat::u2: return "u2";
    case KvFormat::u3: return "u3";
    case KvFormat::u4: return "u4";
    case KvFormat::u8: return "u8";
    case KvFormat::tq1: return "tq1";
    case KvFormat::tq2: return "tq2";
    case KvFormat::tq3: return "tq3";
    case KvFormat::tq4: return "tq4";
    case KvFormat::kivi2_k: return "kivi2_k";
    case KvFormat::kivi4_k: return "kivi4_k";
    case KvFormat::kivi2_v: return "kivi2_v";
    case KvFormat::kivi4_v: return "kivi4_v";
    case KvFormat::f32: return "f32";
    case KvFormat::q5_0: return "q5_0";
    case KvFormat::q5_1: return "q5_1";
    case KvFormat::iq4_nl: return "iq4_nl";
    case KvFormat::nvfp4: return "nvfp4";
    case KvFormat::tq2_5: return "tq2.5";
    case KvFormat::tq3_5: return "tq3.5";
    case KvFormat::tqprod2: return "tqprod2";
    case KvFormat::tqprod3: return "tqprod3";
    case KvFormat::tqprod4: return "tqprod4";
  }
  return "?";
}

// The constants of a TurboQuant key codec (tq1..tq4, tq2.5, tq3.5, tqprod2..4): the rotation
// (Walsh-Hadamard signs and scale, or rot=qr's dense matrix) and the Lloyd-Max codebooks scaled
// for N(0, 1/head_dim), built on the host from the same seed and solution as the CPU codec
// (kernels/gpu/tq_params.h). The dense matrices are pointers: host memory for host code, device
// memory once DevicePagedKv has uploaded them.
inline constexpr int kTqMaxHeadDim = 256;
struct TqParams {
  int bits = 0;      // b: the width of the codes past the outlier channels (tqprod{b}: b - 1)
  int outliers = 0;  // the first `outliers` rotated coordinates take b + 1 bits (tq2.5, tq3.5, :outliers=)
  bool norm_correction = false;
  float rotation_scale = 1.0f;  // 1/sqrt(head_dim) as a float, as HadamardRotation holds it
  float signs[kTqMaxHeadDim] = {};
  float centroids[16] = {};
  float thresholds[15] = {};
  float outlier_centroids[32] = {};  // the (b + 1)-bit codebook
  float outlier_thresholds[31] = {};
  // tqprod{b}: S, head_dim x head_dim row-major (iid N(0, 1) from the seed), and sqrt(pi/2)/head_dim.
  const float* sketch = nullptr;
  float qjl_scale = 0.0f;
  // rot=qr: Q, head_dim x head_dim row-major (OrthogonalRotation::matrix); null for the
  // Walsh-Hadamard rotation (signs, rotation_scale).
  const float* rotation_matrix = nullptr;
};

// The randomized Walsh-Hadamard rotation R = H D / sqrt(head_dim) of the ggml formats' rot=hadamard
// option (llama.cpp's rotated caches; kernels/hadamard.h), built on the host from the seed as the
// CPU codec builds it (kernels/gpu/tq_params.h: make_rotation_params). Rows are stored as q(R x).
struct RotationParams {
  float scale = 1.0f;  // 1/sqrt(head_dim) as a float, as HadamardRotation holds it
  float signs[kTqMaxHeadDim] = {};
};

inline constexpr int kGgmlBlock = 32;

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
KVGATE_HD float rn_mul(float a, float b) { return __fmul_rn(a, b); }
KVGATE_HD float rn_add(float a, float b) { return __fadd_rn(a, b); }
KVGATE_HD float rn_sub(float a, float b) { return __fsub_rn(a, b); }
KVGATE_HD float rn_div(float a, float b) { return __fdiv_rn(a, b); }
#else
KVGATE_HD float rn_mul(float a, float b) { return a * b; }
KVGATE_HD float rn_add(float a, float b) { return a + b; }
KVGATE_HD float rn_sub(float a, float b) { return a - b; }
KVGATE_HD float rn_div(float a, float b) { return a / b; }
#endif

KVGATE_HD bool is_ggml(KvFormat f) {
  return f == KvFormat::q8_0 || f == KvFormat::q5_0 || f == KvFormat::q5_1 || f == KvFormat::q4_0 ||
         f == KvFormat::q4_1 || f == KvFormat::iq4_nl;
}
KVGATE_HD bool is_per_tensor_fp8(KvFormat f) {
  return f == KvFormat::fp8_e4m3 || f == KvFormat::fp8_e5m2 || f == KvFormat::fp8_e4m3fnuz;
}
KVGATE_HD bool has_row_scale(KvFormat f) {
  return f == KvFormat::int8_pth || f == KvFormat::fp8_pth || f == KvFormat::int4_pth;
}
KVGATE_HD bool is_uniform(KvFormat f) {
  return f == KvFormat::u2 || f == KvFormat::u3 || f == KvFormat::u4 || f == KvFormat::u8;
}
KVGATE_HD int uniform_bits(KvFormat f) {
  return f == KvFormat::u2 ? 2 : f == KvFormat::u3 ? 3 : f == KvFormat::u4 ? 4 : 8;
}
KVGATE_HD bool is_tqprod(KvFormat f) {
  return f == KvFormat::tqprod2 || f == KvFormat::tqprod3 || f == KvFormat::tqprod4;
}
// Every TurboQuant key format: rotated rows, codec constants in TqParams.
KVGATE_HD bool is_tq(KvFormat f) {
  return f == KvFormat::tq1 || f == KvFormat::tq2 || f == KvFormat::tq3 || f == KvFormat::tq4 ||
         f == KvFormat::tq2_5 || f == KvFormat::tq3_5 || is_tqprod(f);
}
// The code width past the outlier channels (TqParams::bits); tqprod{b} spends one of its b bits
// on the QJL sign.
KVGATE_HD int tq_bits(KvFormat f) {
  switch (f) {
    case KvFormat::tq1:
    case KvFormat::tqprod2: return 1;
    case KvFormat::tq2:
    case KvFormat::tq2_5:
    case KvFormat::tqprod3: return 2;
    case KvFormat::tq3:
    case KvFormat::tq3_5:
    case KvFormat::tqprod4: return 3;
    default: return 4;
  }
}
// Outlier channels when the spec names none (make_mse in kernels/formats_turboquant.cc).
KVGATE_HD int tq_default_outliers(KvFormat f, int head_dim) {
  return f == KvFormat::tq2_5 || f == KvFormat::tq3_5 ? head_dim / 4 : 0;
}
KVGATE_HD size_t tq_code_bits(int bits, int outliers, int head_dim) {
  return static_cast<size_t>(outliers) * (bits + 1) + static_cast<size_t>(head_dim - outliers) * bits;
}
KVGATE_HD bool is_kivi_key(KvFormat f) { return f == KvFormat::kivi2_k || f == KvFormat::kivi4_k; }
KVGATE_HD bool is_kivi_value(KvFormat f) { return f == KvFormat::kivi2_v || f == KvFormat::kivi4_v; }
KVGATE_HD bool is_kivi(KvFormat f) { return is_kivi_key(f) || is_kivi_value(f); }
KVGATE_HD int kivi_bits(KvFormat f) { return f == KvFormat::kivi2_k || f == KvFormat::kivi2_v ? 2 : 4; }
inline constexpr int kKiviDefaultGroup = 32;          // tokens per key group (kernels/formats_kivi.cc)
inline constexpr int kKiviValueChannelGroup = 32;     // channels per value scale
KVGATE_HD Fp8Kind fp8_kind(KvFormat f) {
  return f == KvFormat::fp8_e5m2 ? Fp8Kind::e5m2 : f == KvFormat::fp8_e4m3fnuz ? Fp8Kind::e4m3fnuz : Fp8Kind::e4m3fn;
}
// Sizes of ggml-common.h's blocks (static_asserted in kernels/ggml_blocks.h).
KVGATE_HD size_t ggml_block_bytes(KvFormat f) {
  switch (f) {
    case KvFormat::q8_0: return 34;
    case KvFormat::q5_0: return 22;
    case KvFormat::q5_1: return 24;
    case KvFormat::q4_1: return 20;
    default: return 18;  // q4_0, iq4_nl
  }
}
inline constexpr int kNvfp4Block = 16;
inline constexpr int kNvfp4BlockBytes = 1 + kNvfp4Block / 2;

// Bytes of one row. Callers check the head_dim first (gpu_kv.h: kv_row_bytes). `tq`: the
// outlier channels of tq{b} rows (null: the format's default).
KVGATE_HD size_t row_bytes(KvFormat f, int head_dim, const TqParams* tq = nullptr) {
  const size_t d = static_cast<size_t>(head_dim);
  if (is_ggml(f)) return d / kGgmlBlock * ggml_block_bytes(f);
  if (f == KvFormat::nvfp4) return d / kNvfp4Block * kNvfp4BlockBytes;
  if (f == KvFormat::f16 || f == KvFormat::bf16) return 2 * d;
  if (f == KvFormat::f32) return 4 * d;
  if (is_per_tensor_fp8(f)) return d;
  if (f == KvFormat::int4_pth) return 4 + d / 2;
  if (is_uniform(f)) return 4 + (d * uniform_bits(f) + 7) / 8;
  if (is_tqprod(f)) return 4 + (d * tq_bits(f) + 7) / 8 + (d + 7) / 8;
  if (is_tq(f)) return 2 + (tq_code_bits(tq_bits(f), tq ? tq->outliers : tq_default_outliers(f, head_dim), head_dim) + 7) / 8;
  if (is_kivi_value(f)) return 4 * (d / kKiviValueChannelGroup) + (d * kivi_bits(f) + 7) / 8;
  if (is_kivi_key(f)) return 4 * d + (static_cast<size_t>(kKiviDefaultGroup) * d * kivi_bits(f) + 7) / 8;
  return 4 + d;  // int8_pth, fp8_pth: f32 scale + one byte per element
}

// Bytes of one storage unit: a row, or for KIVI keys a group of `group` tokens.
KVGATE_HD size_t unit_bytes(KvFormat f, int head_dim, int group, const TqParams* tq = nullptr) {
  if (!is_kivi_key(f)) return row_bytes(f, head_dim, tq);
  return 4 * static_cast<size_t>(head_dim) + (static_cast<size_t>(group) * head_dim * kivi_bits(f) + 7) / 8;
}

// Rows are packed back to back, so multi-byte fields are unaligned: byte by byte, little-endian.
KVGATE_HD void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
KVGATE_HD uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
KVGATE_HD void store_f32(uint8_t* p, float v) {
  const uint32_t u = f32_bits(v);
  for (int k = 0; k < 4; ++k) p[k] = static_cast<uint8_t>(u >> (8 * k));
}
KVGATE_HD float load_f32(const uint8_t* p) {
  return f32_from_bits(p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24));
}

// static_cast<int8_t>(float) as the x86-64 CPU reference executes it: cvttss2si to 32 bits (NaN
// and out-of-range give INT_MIN), then the low byte. A GPU's own conversion saturates instead.
KVGATE_HD int x86_trunc_to_int8(float v) {
  const int wide = (v >= -2147483648.0f && v < 2147483648.0f) ? static_cast<int>(v) : INT_MIN;
  return static_cast<int8_t>(static_cast<uint8_t>(static_cast<unsigned>(wide) & 0xffu));
}

// std::nearbyint, then a clamp in the float domain so NaN lands on `lo` (formats_pth.cc).
KVGATE_HD int round_clamp(float v, int lo, int hi) {
  const float r = rintf(v);
  if (!(r >= static_cast<float>(lo))) return lo;
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

// std::max(acc, |x|) over the row: a NaN element never replaces the running maximum.
KVGATE_HD float row_abs_max(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = fabsf(x[i]);
    amax = amax < a ? a : amax;
  }
  return amax;
}

// ---- ggml blocks, operation for operation as kernels/formats_ggml.cc ----

KVGATE_HD void encode_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < kGgmlBlock; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = rn_div(amax, 127.0f);
  const float id = d != 0.0f ? rn_div(1.0f, d) : 0.0f;
  store_u16(b, f32_to_f16(d));
  for (int j = 0; j < kGgmlBlock; ++j) b[2 + j] = static_cast<uint8_t>(x86_trunc_to_int8(roundf(rn_mul(x[j], id))));
}

// ggml's "signed value of the first element with the largest magnitude".
KVGATE_HD float signed_abs_max(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kGgmlBlock; ++j) {
    if (amax < fabsf(x[j])) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  return max;
}

KVGATE_HD void encode_q4_0(const float* x, uint8_t* b) {
  const float d = rn_div(signed_abs_max(x), -8.0f);
  const float id = d != 0.0f ? rn_div(1.0f, d) : 0.0f;
  store_u16(b, f32_to_f16(d));
  for (int j = 0; j < 16; ++j) {
    const int lo = x86_trunc_to_int8(rn_add(rn_mul(x[j], id), 8.5f));
    const int hi = x86_trunc_to_int8(rn_add(rn_mul(x[16 + j], id), 8.5f));
    b[2 + j] = static_cast<uint8_t>((lo < 15 ? lo : 15) | ((hi < 15 ? hi : 15) << 4));
  }
}

// The block header q4_1 and q5_1 share: d = (max - min) / levels and the minimum, as fp16, in
// the first 4 bytes; lo and id (1/d, 0 for a flat block) for the codes.
KVGATE_HD void store_min_scale(const float* x, float levels, uint8_t* b, float& lo, float& id) {
  float hi = -FLT_MAX;
  lo = FLT_MAX;
  for (int j = 0; j < kGgmlBlock; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  const float d = rn_div(rn_sub(hi, lo), levels);
  id = d != 0.0f ? rn_div(1.0f, d) : 0.0f;
  store_u16(b, f32_to_f16(d));
  store_u16(b + 2, f32_to_f16(lo));
}

KVGATE_HD void encode_q4_1(const float* x, uint8_t* b) {
  float lo, id;
  store_min_scale(x, 15.0f, b, lo, id);
  for (int j = 0; j < 16; ++j) {
    const int c0 = x86_trunc_to_int8(rn_add(rn_mul(rn_sub(x[j], lo), id), 0.5f));
    const int c1 = x86_trunc_to_int8(rn_add(rn_mul(rn_sub(x[16 + j], lo), id), 0.5f));
    b[4 + j] = static_cast<uint8_t>((c0 < 15 ? c0 : 15) | ((c1 < 15 ? c1 : 15) << 4));
  }
}

// static_cast<uint8_t>(float) as the x86-64 CPU reference executes it: the same 32-bit
// cvttss2si, then the low byte (q5_1 keeps its low 5 bits without a clamp, as ggml does).
KVGATE_HD int x86_trunc_to_uint8(float v) { return x86_trunc_to_int8(v) & 0xff; }

// Where a block's packed low nibbles start: after d, ggml's m (q4_1, q5_1) and qh (q5_0, q5_1).
KVGATE_HD int ggml_nibble_offset(KvFormat f) {
  return f == KvFormat::q5_1 ? 8 : f == KvFormat::q5_0 ? 6 : f == KvFormat::q4_1 ? 4 : 2;
}
KVGATE_HD bool is_q5(KvFormat f) { return f == KvFormat::q5_0 || f == KvFormat::q5_1; }

// A 5-bit code into a zeroed q5 block: the low nibble as q4_0 packs it (element j in qs[j],
// element j + 16 in the high half), the 5th bit in bit j of the little-endian u32 qh.
KVGATE_HD void put_q5(uint8_t* qh, uint8_t* qs, int j, int code) {
  qs[j & 15] |= static_cast<uint8_t>((code & 0x0f) << (j < 16 ? 0 : 4));
  qh[j >> 3] |= static_cast<uint8_t>(((code >> 4) & 1) << (j & 7));
}

KVGATE_HD void encode_q5_0(const float* x, uint8_t* b) {
  const float d = rn_div(signed_abs_max(x), -16.0f);
  const float id = d != 0.0f ? rn_div(1.0f, d) : 0.0f;
  store_u16(b, f32_to_f16(d));
  for (int k = 2; k < 22; ++k) b[k] = 0;
  for (int j = 0; j < kGgmlBlock; ++j) {
    const int c = x86_trunc_to_uint8(rn_add(rn_mul(x[j], id), 16.5f));  // uint8(int8(v)) on x86
    put_q5(b + 2, b + 6, j, c < 31 ? c : 31);
  }
}

KVGATE_HD void encode_q5_1(const float* x, uint8_t* b) {
  float lo, id;
  store_min_scale(x, 31.0f, b, lo, id);
  for (int k = 4; k < 24; ++k) b[k] = 0;
  for (int j = 0; j < kGgmlBlock; ++j) put_q5(b + 4, b + 8, j, x86_trunc_to_uint8(rn_add(rn_mul(rn_sub(x[j], lo), id), 0.5f)));
}

// kValuesIq4nl (kernels/ggml_blocks.h) packed little-endian into two words, so the device
// reads the grid from registers instead of an indexed array in local memory.
KVGATE_HD float iq4nl_value(int i) {
  constexpr uint64_t kLow = 0xf6eaddcfbfad9881ull, kHigh = 0x7159453526190d01ull;
  return static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>((i < 8 ? kLow : kHigh) >> (8 * (i & 7)))));
}

// ggml's best_index_int8: bisection to the nearest grid value, a tie to the upper one (NaN
// ends on 15, as every comparison fails).
KVGATE_HD int best_index_iq4nl(float x) {
  if (x <= iq4nl_value(0)) return 0;
  if (x >= iq4nl_value(15)) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < iq4nl_value(mid)) hi = mid;
    else lo = mid;
  }
  return rn_sub(x, iq4nl_value(hi - 1)) < rn_sub(iq4nl_value(hi), x) ? hi - 1 : hi;
}

// quantize_row_iq4_nl_ref with ntry = -1: indices from the signed-max scale, then the x^2
// weighted least-squares scale for those indices; a block below 1e-15 stores d = 0, indices 0.
KVGATE_HD void encode_iq4_nl(const float* x, uint8_t* b) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kGgmlBlock; ++j) {
    const float ax = fabsf(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  for (int k = 0; k < 18; ++k) b[k] = 0;  // also the f16 of 0.0f
  if (amax < 1e-15f) return;
  const float d0 = rn_div(max, iq4nl_value(0));
  const float id = rn_div(1.0f, d0);
  float sumqx = 0.0f, sumq2 = 0.0f;
  for (int j = 0; j < kGgmlBlock; ++j) {
    const float w = rn_mul(x[j], x[j]);
    const int idx = best_index_iq4nl(rn_mul(id, x[j]));
    const float q = iq4nl_value(idx);
    sumqx = rn_add(sumqx, rn_mul(rn_mul(w, q), x[j]));
    sumq2 = rn_add(sumq2, rn_mul(rn_mul(w, q), q));
    b[2 + (j & 15)] |= static_cast<uint8_t>(idx << (j < 16 ? 0 : 4));
  }
  store_u16(b, f32_to_f16(rn_div(sumqx, sumq2)));
}

// The code of element j of a ggml block other than q8_0 (4 bits, or 5 for q5_0/q5_1).
KVGATE_HD int ggml_code(KvFormat f, const uint8_t* b, int j) {
  const uint8_t packed = b[ggml_nibble_offset(f) + (j & 15)];
  const int nibble = j < 16 ? (packed & 0x0f) : (packed >> 4);
  if (!is_q5(f)) return nibble;
  const uint8_t* qh = b + (f == KvFormat::q5_1 ? 4 : 2);
  return nibble | (((qh[j >> 3] >> (j & 7)) & 1) << 4);
}
// A code's value given the block's d and (q4_1, q5_1) m, in the CPU dequantize's operation order.
KVGATE_HD float ggml_value(KvFormat f, int q, float d, float m) {
  switch (f) {
    case KvFormat::q4_0: return rn_mul(static_cast<float>(q - 8), d);
    case KvFormat::q5_0: return rn_mul(static_cast<float>(q - 16), d);
    case KvFormat::iq4_nl: return rn_mul(d, iq4nl_value(q));
    default: return rn_add(rn_mul(static_cast<float>(q), d), m);  // q4_1, q5_1
  }
}

// ---- nvfp4: E2M1 elements in 16-element blocks with an E4M3 block scale, as kernels/formats_nvfp4.cc ----
// Layout per block: [e4m3 scale][8 bytes, element 2i in the low nibble, 2i + 1 in the high].
// `g` is the per-tensor global scale (FormatOptions::scale).

// Round to nearest, ties to the even code, saturating at 6; the sign bit is kept for -0 and NaN.
KVGATE_HD uint8_t e2m1_code(float v) {
  const float a = fabsf(v);
  uint8_t code;
  if (a <= 0.25f) code = 0;
  else if (a < 0.75f) code = 1;
  else if (a <= 1.25f) code = 2;
  else if (a < 1.75f) code = 3;
  else if (a <= 2.5f) code = 4;
  else if (a < 3.5f) code = 5;
  else if (a <= 5.0f) code = 6;
  else code = 7;
  return static_cast<uint8_t>(code | ((f32_bits(v) >> 31) ? 0x8 : 0x0));
}
// Twice the magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} fit a nibble each, so the table is one word.
KVGATE_HD float e2m1_value(uint32_t code) {
  const float v = static_cast<float>((0xc8643210u >> (4 * (code & 7))) & 0xfu) * 0.5f;
  return (code & 0x8) ? -v : v;
}

KVGATE_HD void encode_nvfp4(float g, int head_dim, const float* x, uint8_t* dst) {
  for (int blk = 0; blk < head_dim / kNvfp4Block; ++blk, x += kNvfp4Block, dst += kNvfp4BlockBytes) {
    float amax = 0.0f;
    for (int j = 0; j < kNvfp4Block; ++j) amax = fmaxf(amax, fabsf(x[j]));
    const uint8_t scale_code = f32_to_fp8(rn_div(rn_div(amax, 6.0f), g), Fp8Kind::e4m3fn);
    const float block_scale = rn_mul(fp8_to_f32(scale_code, Fp8Kind::e4m3fn), g);
    dst[0] = scale_code;
    for (int j = 0; j < kNvfp4Block; j += 2) {
      const uint8_t lo = block_scale == 0.0f ? 0 : e2m1_code(rn_div(x[j], block_scale));
      const uint8_t hi = block_scale == 0.0f ? 0 : e2m1_code(rn_div(x[j + 1], block_scale));
      dst[1 + j / 2] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

KVGATE_HD float nvfp4_element(const uint8_t* row, int i, float g) {
  const uint8_t* b = row + (i / kNvfp4Block) * kNvfp4BlockBytes;
  const uint8_t packed = b[1 + (i % kNvfp4Block) / 2];
  return rn_mul(rn_mul(e2m1_value((i & 1) ? packed >> 4 : packed & 0x0f), fp8_to_f32(b[0], Fp8Kind::e4m3fn)), g);
}

// ---- u{b}: per-token asymmetric uniform, as kernels/formats_uniform.cc ----
// Layout: [f16 scale][f16 zero][codes, b bits each, LSB-first].

KVGATE_HD uint32_t uniform_code(const uint8_t* codes, int i, int bits) {
  const int bit = i * bits;
  uint32_t w = codes[bit / 8];
  if (bit % 8 + bits > 8) w |= static_cast<uint32_t>(codes[bit / 8 + 1]) << 8;
  return (w >> (bit % 8)) & ((1u << bits) - 1u);
}

KVGATE_HD void encode_uniform(int bits, int head_dim, const float* x, uint8_t* dst) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int i = 0; i < head_dim; ++i) {
    min = fminf(min, x[i]);
    max = fmaxf(max, x[i]);
  }
  const int levels = (1 << bits) - 1;
  const uint16_t scale_h = f32_to_f16(rn_div(rn_sub(max, min), static_cast<float>(levels)));
  const uint16_t zero_h = f32_to_f16(min);
  store_u16(dst, scale_h);
  store_u16(dst + 2, zero_h);
  const float s = f16_to_f32(scale_h), z = f16_to_f32(zero_h);
  uint8_t* codes = dst + 4;
  const int code_bytes = (head_dim * bits + 7) / 8;
  for (int b = 0; b < code_bytes; ++b) codes[b] = 0;
  for (int i = 0; i < head_dim; ++i) {
    int c = 0;
    if (s > 0.0f && s <= FLT_MAX) {
      const float r = rintf(rn_div(rn_sub(x[i], z), s));
      c = r >= 0.0f ? static_cast<int>(r < static_cast<float>(levels) ? r : static_cast<float>(levels)) : 0;
    }
    const int bit = i * bits;
    const uint32_t shifted = static_cast<uint32_t>(c) << (bit % 8);
    codes[bit / 8] |= static_cast<uint8_t>(shifted);
    if (bit % 8 + bits > 8) codes[bit / 8 + 1] |= static_cast<uint8_t>(shifted >> 8);
  }
}

// ---- tq{b}: TurboQuant keys, as TurboQuantMseCodec in kernels/formats_turboquant.cc ----
// Layout: [f16 norm][codes, LSB-first, rotated coordinate 0 first: b + 1 bits for the first
// `outliers` coordinates, b for the rest]. Values are in the rotated basis; attention rotates
// the query instead (kernels/gpu/gpu_kv.cu).

// Coordinate i's code: the outlier channels' (b + 1)-bit codes come first in the stream.
KVGATE_HD uint32_t tq_code(const TqParams& p, const uint8_t* codes, int i) {
  const bool outlier = i < p.outliers;
  const int width = outlier ? p.bits + 1 : p.bits;
  const int first = outlier ? i * width : p.outliers * (p.bits + 1) + (i - p.outliers) * p.bits;
  uint32_t code = 0;
  for (int k = 0; k < width; ++k) {
    const int bit = first + k;
    code |= static_cast<uint32_t>((codes[bit >> 3] >> (bit & 7)) & 1u) << k;
  }
  return code;
}
KVGATE_HD float tq_centroid(const TqParams& p, int i, uint32_t code) {
  return i < p.outliers ? p.outlier_centroids[code] : p.centroids[code];
}

// In-place unnormalized Walsh-Hadamard transform, Sylvester order (kernels/hadamard.h).
KVGATE_HD void fwht(float* x, int n) {
  for (int len = 1; len < n; len <<= 1)
    for (int i = 0; i < n; i += len << 1)
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = rn_add(a, b);
        x[j + len] = rn_sub(a, b);
      }
}

// out = R x and out = R^T x (out may equal x), operation for operation as HadamardRotation's
// forward and inverse.
KVGATE_HD void rotate_forward(const RotationParams& r, int n, const float* x, float* out) {
  for (int i = 0; i < n; ++i) out[i] = rn_mul(x[i], r.signs[i]);
  fwht(out, n);
  for (int i = 0; i < n; ++i) out[i] = rn_mul(out[i], r.scale);
}
KVGATE_HD void rotate_inverse(const RotationParams& r, int n, const float* x, float* out) {
  for (int i = 0; i < n; ++i) out[i] = x[i];
  fwht(out, n);
  for (int i = 0; i < n; ++i) out[i] = rn_mul(out[i], rn_mul(r.scale, r.signs[i]));
}

// y = R u for the unit key u = x * inv, as KeyRotation::forward computes it: the Walsh-Hadamard
// rotation, or rot=qr's Q with each output summed in double (OrthogonalRotation::forward).
KVGATE_HD void tq_rotate_unit(const TqParams& p, int head_dim, const float* x, float inv, float* y) {
  if (p.rotation_matrix) {
    float unit[kTqMaxHeadDim];
    for (int i = 0; i < head_dim; ++i) unit[i] = rn_mul(x[i], inv);
    for (int row = 0; row < head_dim; ++row) {
      // Products of two floats are exact in double, so a fused multiply-add cannot change the sum.
      const float* q = p.rotation_matrix + static_cast<size_t>(row) * head_dim;
      double sum = 0.0;
      for (int col = 0; col < head_dim; ++col) sum += static_cast<double>(q[col]) * unit[col];
      y[row] = static_cast<float>(sum);
    }
    return;
  }
  for (int i = 0; i < head_dim; ++i) y[i] = rn_mul(rn_mul(x[i], inv), p.signs[i]);
  fwht(y, head_dim);
  for (int i = 0; i < head_dim; ++i) y[i] = rn_mul(y[i], p.rotation_scale);
}

KVGATE_HD void encode_tq(const TqParams& p, int head_dim, const float* x, uint8_t* dst) {
  const int code_bytes = static_cast<int>((tq_code_bits(p.bits, p.outliers, head_dim) + 7) / 8);
  for (int b = 0; b < 2 + code_bytes; ++b) dst[b] = 0;
  double norm2 = 0.0;
  for (int i = 0; i < head_dim; ++i) norm2 += static_cast<double>(x[i]) * x[i];
  const double norm = sqrt(norm2);
  if (!(norm > 0.0) || !(norm <= DBL_MAX)) return;  // a zero or non-finite key: the zero vector
  const float inv = static_cast<float>(1.0 / norm);
  float y[kTqMaxHeadDim];
  tq_rotate_unit(p, head_dim, x, inv, y);
  double centroid_norm2 = 0.0;
  int bit = 0;
  for (int i = 0; i < head_dim; ++i) {
    const float v = y[i];
    const bool outlier = i < p.outliers;
    const int width = outlier ? p.bits + 1 : p.bits;
    const float* thresholds = outlier ? p.outlier_thresholds : p.thresholds;
    const int last = (1 << width) - 1;
    int code = 0;  // std::upper_bound over the thresholds: how many are <= v (all of them for NaN)
    while (code < last && !(v < thresholds[code])) ++code;
    for (int k = 0; k < width; ++k, ++bit)
      if ((code >> k) & 1) dst[2 + (bit >> 3)] |= static_cast<uint8_t>(1u << (bit & 7));
    const float c = tq_centroid(p, i, static_cast<uint32_t>(code));
    centroid_norm2 += static_cast<double>(c) * c;
  }
  const double stored = p.norm_correction ? norm / sqrt(centroid_norm2) : norm;
  store_u16(dst, f32_to_f16(static_cast<float>(65504.0 < stored ? 65504.0 : stored)));
}

// ---- tqprod{b}: TurboQuant_prod keys, as TurboQuantProdCodec in kernels/formats_turboquant.cc ----
// Layout: [f16 norm][f16 residual norm gamma][(b-1)-bit codes as tq{b-1}][head_dim sign bits,
// LSB-first, 1 = +]. The signs are sign(S r) of the residual r = y - c of the rotated unit key.

KVGATE_HD const uint8_t* tqprod_signs(const TqParams& p, const uint8_t* row, int head_dim) {
  return row + 4 + (head_dim * p.bits + 7) / 8;
}
KVGATE_HD float tqprod_sign(const uint8_t* signs, int j) { return (signs[j >> 3] >> (j & 7)) & 1u ? 1.0f : -1.0f; }

KVGATE_HD void encode_tqprod(const TqParams& p, int head_dim, const float* x, uint8_t* dst) {
  const int code_bytes = (head_dim * p.bits + 7) / 8;
  for (int b = 0; b < 4 + code_bytes + (head_dim + 7) / 8; ++b) dst[b] = 0;
  double norm2 = 0.0;
  for (int i = 0; i < head_dim; ++i) norm2 += static_cast<double>(x[i]) * x[i];
  const double norm = sqrt(norm2);
  if (!(norm > 0.0) || !(norm <= DBL_MAX)) return;  // a zero or non-finite key: all zero bytes
  const float inv = static_cast<float>(1.0 / norm);
  float y[kTqMaxHeadDim];
  tq_rotate_unit(p, head_dim, x, inv, y);
  const int last = (1 << p.bits) - 1;
  double r2 = 0.0;
  for (int i = 0; i < head_dim; ++i) {
    int code = 0;  // as encode_tq
    while (code < last && !(y[i] < p.thresholds[code])) ++code;
    for (int k = 0; k < p.bits; ++k) {
      const int bit = i * p.bits + k;
      if ((code >> k) & 1) dst[4 + (bit >> 3)] |= static_cast<uint8_t>(1u << (bit & 7));
    }
    y[i] = rn_sub(y[i], p.centroids[code]);  // the residual, in place
    r2 += static_cast<double>(y[i]) * y[i];
  }
  uint8_t* signs = dst + 4 + code_bytes;
  for (int j = 0; j < head_dim; ++j) {
    // Products of two floats are exact in double, so a fused multiply-add cannot change the sum.
    const float* s_row = p.sketch + static_cast<size_t>(j) * head_dim;
    double s = 0.0;
    for (int i = 0; i < head_dim; ++i) s += static_cast<double>(s_row[i]) * y[i];
    if (s >= 0.0) signs[j >> 3] |= static_cast<uint8_t>(1u << (j & 7));
  }
  store_u16(dst, f32_to_f16(static_cast<float>(65504.0 < norm ? 65504.0 : norm)));
  const double gamma = sqrt(r2);
  store_u16(dst + 2, f32_to_f16(static_cast<float>(65504.0 < gamma ? 65504.0 : gamma)));
}

// Element i in the rotated basis (dequantize_stored_ref): ||k|| (c_i + qjl_scale gamma (S^T z)_i),
// (S^T z)_i summed in double over j in order. O(head_dim) per element: attention never calls it
// (it scores keys with tqprod_spans against S q).
KVGATE_HD float tqprod_element(const TqParams& p, int head_dim, const uint8_t* row, int i) {
  const uint8_t* signs = tqprod_signs(p, row, head_dim);
  double back = 0.0;
  for (int j = 0; j < head_dim; ++j)
    back += static_cast<double>(tqprod_sign(signs, j)) * p.sketch[static_cast<size_t>(j) * head_dim + i];
  const float c = p.centroids[tq_code(p, row + 4, i)];
  const float norm = f16_to_f32(load_u16(row)), gamma = f16_to_f32(load_u16(row + 2));
  return rn_mul(norm, rn_add(c, rn_mul(rn_mul(p.qjl_scale, gamma), static_cast<float>(back))));
}

// sq = S q for a rotated query (TurboQuantProdCodec::sketch_query: float, i in order).
KVGATE_HD void tqprod_sketch_query(const TqParams& p, int head_dim, const float* q, float* sq) {
  for (int j = 0; j < head_dim; ++j) {
    const float* s_row = p.sketch + static_cast<size_t>(j) * head_dim;
    float s = 0.0f;
    for (int i = 0; i < head_dim; ++i) s = rn_add(s, rn_mul(s_row[i], q[i]));
    sq[j] = s;
  }
}

// <q, k~> = ||k|| (<q, c> + qjl_scale gamma <S q, z>) as the CPU codec's dot_ref computes it.
KVGATE_HD float tqprod_dot(const TqParams& p, int head_dim, const float* q, const float* sq, const uint8_t* row) {
  const uint8_t* signs = tqprod_signs(p, row, head_dim);
  float mse_part = 0.0f, qjl_part = 0.0f;
  for (int i = 0; i < head_dim; ++i) {
    mse_part = rn_add(mse_part, rn_mul(q[i], p.centroids[tq_code(p, row + 4, i)]));
    qjl_part = (signs[i >> 3] >> (i & 7)) & 1u ? rn_add(qjl_part, sq[i]) : rn_sub(qjl_part, sq[i]);
  }
  const float norm = f16_to_f32(load_u16(row)), gamma = f16_to_f32(load_u16(row + 2));
  return rn_mul(norm, rn_add(mse_part, rn_mul(rn_mul(p.qjl_scale, gamma), qjl_part)));
}

// The two halves of the score over elements [i0, i0 + n) (zero past n): mse[k] = ||k|| c_i
// against q, qjl[k] = +-||k|| qjl_scale gamma against S q; their sum over a row is <q, k~>.
template <int N>
KVGATE_HD void tqprod_spans(const TqParams& p, int head_dim, const uint8_t* row, int i0, int n, float* mse, float* qjl) {
  const float norm = f16_to_f32(load_u16(row));
  const float weight = rn_mul(norm, rn_mul(p.qjl_scale, f16_to_f32(load_u16(row + 2))));
  const uint8_t* signs = tqprod_signs(p, row, head_dim);
  KVGATE_UNROLL
  for (int k = 0; k < N; ++k) {
    mse[k] = k < n ? rn_mul(norm, p.centroids[tq_code(p, row + 4, i0 + k)]) : 0.0f;
    qjl[k] = k < n ? rn_mul(tqprod_sign(signs, i0 + k), weight) : 0.0f;
  }
}

// ---- KIVI, as kernels/formats_kivi.cc: asymmetric codes with the fp16 (scale, min) as stored ----
// Keys: a group of G tokens per unit, per channel c: scale[c] | min[c] (fp16) | codes token-major
// (index t * d + c), b bits LSB-first. Values: per token, (scale, min) per 32 channels | codes.
// The cache quantizes them from its f16 window, so the encoders read what the window holds.

KVGATE_HD float kivi_f16(float v) {  // to_f16 with the clamp to +-65504 (NaN passes through)
  return f16_to_f32(f32_to_f16(v < -65504.0f ? -65504.0f : (65504.0f < v ? 65504.0f : v)));
}
KVGATE_HD uint32_t kivi_code_at(const uint8_t* codes, size_t index, int bits) {
  const size_t bit = index * bits;
  return (codes[bit >> 3] >> (bit & 7)) & ((1u << bits) - 1u);
}
KVGATE_HD void kivi_put_code(uint8_t* codes, size_t index, int bits, uint32_t code) {
  const size_t bit = index * bits;
  codes[bit >> 3] |= static_cast<uint8_t>(code << (bit & 7));
}
struct KiviRange {
  float scale, min;
};
KVGATE_HD KiviRange kivi_range(float lo, float hi, int bits) {
  const float min = kivi_f16(lo);
  return {kivi_f16(rn_div(rn_sub(hi, min), static_cast<float>((1 << bits) - 1))), min};
}
KVGATE_HD uint32_t kivi_encode(float x, KiviRange r, int bits) {
  if (!(r.scale > 0.0f)) return 0;
  const float q = rintf(rn_div(rn_sub(x, r.min), r.scale));
  const float top = static_cast<float>((1 << bits) - 1);
  const float v = q != q ? 0.0f : q;
  return static_cast<uint32_t>(v < 0.0f ? 0.0f : (top < v ? top : v));  // std::clamp(v, 0, top)
}
KVGATE_HD void store_f16_of(uint8_t* p, float v) { store_u16(p, f32_to_f16(v < -65504.0f ? -65504.0f : (65504.0f < v ? 65504.0f : v))); }

// A group of `group` key tokens; row t of the group is rows_f16 + t * stride (halves).
KVGATE_HD void encode_kivi_key_group(int bits, int head_dim, int group, const uint16_t* rows_f16, size_t stride,
                                     uint8_t* dst) {
  const size_t d = static_cast<size_t>(head_dim);
  const size_t bytes = 4 * d + (static_cast<size_t>(group) * d * bits + 7) / 8;
  for (size_t b = 0; b < bytes; ++b) dst[b] = 0;
  uint8_t* codes = dst + 4 * d;
  for (size_t c = 0; c < d; ++c) {
    float lo = f16_to_f32(rows_f16[c]), hi = lo;
    for (int t = 1; t < group; ++t) {
      const float x = f16_to_f32(rows_f16[t * stride + c]);
      lo = x < lo ? x : lo;  // std::min(lo, x)
      hi = hi < x ? x : hi;  // std::max(hi, x)
    }
    const KiviRange r = kivi_range(lo, hi, bits);
    store_f16_of(dst + 2 * c, r.scale);
    store_f16_of(dst + 2 * (d + c), r.min);
    for (int t = 0; t < group; ++t)
      kivi_put_code(codes, t * d + c, bits, kivi_encode(f16_to_f32(rows_f16[t * stride + c]), r, bits));
  }
}

// libstdc++'s std::minmax_element over n floats, pair by pair, so NaN inputs pick the same
// elements the CPU reference picks.
KVGATE_HD void minmax_like_libstdcxx(const float* x, int n, float* lo, float* hi) {
  int mn = 0, mx = 0;
  int i = 1;
  if (n > 1) {
    if (x[1] < x[mn]) mn = 1;
    else mx = 1;
    i = 2;
  }
  while (i < n) {
    const int a = i;
    if (i + 1 == n) {
      if (x[a] < x[mn]) mn = a;
      else if (!(x[a] < x[mx])) mx = a;
      break;
    }
    const int b = i + 1;
    if (x[b] < x[a]) {
      if (x[b] < x[mn]) mn = b;
      if (!(x[a] < x[mx])) mx = a;
    } else {
      if (x[a] < x[mn]) mn = a;
      if (!(x[b] < x[mx])) mx = b;
    }
    i += 2;
  }
  *lo = x[mn];
  *hi = x[mx];
}

KVGATE_HD void encode_kivi_value(int bits, int head_dim, const float* x, uint8_t* dst) {
  const int groups = head_dim / kKiviValueChannelGroup;
  const size_t bytes = 4 * static_cast<size_t>(groups) + (static_cast<size_t>(head_dim) * bits + 7) / 8;
  for (size_t b = 0; b < bytes; ++b) dst[b] = 0;
  uint8_t* codes = dst + 4 * groups;
  for (int g = 0; g < groups; ++g) {
    const float* part = x + g * kKiviValueChannelGroup;
    float lo, hi;
    minmax_like_libstdcxx(part, kKiviValueChannelGroup, &lo, &hi);
    const KiviRange r = kivi_range(lo, hi, bits);
    store_f16_of(dst + 4 * g, r.scale);
    store_f16_of(dst + 4 * g + 2, r.min);
    for (int c = 0; c < kKiviValueChannelGroup; ++c)
      kivi_put_code(codes, static_cast<size_t>(g) * kKiviValueChannelGroup + c, bits, kivi_encode(part[c], r, bits));
  }
}

// One row, sequentially, exactly as the CPU codec's quantize_ref. `tensor_scale` is the
// per-tensor scale of the fp8_e4m3/e5m2/e4m3fnuz formats (stored = fp8(x / scale)) and the
// global scale of nvfp4.
// `tq`: the codec constants of the tq{b} formats (ignored by the others). `rot`: the ggml
// formats' Hadamard rotation, or null (the others take none).
KVGATE_HD void encode_row(KvFormat f, int head_dim, float tensor_scale, const float* x, uint8_t* dst,
                          const TqParams* tq = nullptr, const RotationParams* rot = nullptr) {
  switch (f) {
    case KvFormat::f32:  // the bits as they are, NaN payloads included (the CPU codec copies)
      for (int i = 0; i < head_dim; ++i) store_f32(dst + 4 * i, x[i]);
      return;
    case KvFormat::tq1:
    case KvFormat::tq2:
    case KvFormat::tq3:
    case KvFormat::tq4:
    case KvFormat::tq2_5:
    case KvFormat::tq3_5:
      encode_tq(*tq, head_dim, x, dst);
      return;
    case KvFormat::tqprod2:
    case KvFormat::tqprod3:
    case KvFormat::tqprod4:
      encode_tqprod(*tq, head_dim, x, dst);
      return;
    case KvFormat::kivi2_v:
    case KvFormat::kivi4_v:
      encode_kivi_value(kivi_bits(f), head_dim, x, dst);
      return;
    case KvFormat::kivi2_k:
    case KvFormat::kivi4_k:
      return;  // keys are encoded a group at a time (encode_kivi_key_group)
    case KvFormat::f16:
      for (int i = 0; i < head_dim; ++i) store_u16(dst + 2 * i, f32_to_f16(x[i]));
      return;
    case KvFormat::bf16:
      for (int i = 0; i < head_dim; ++i) store_u16(dst + 2 * i, f32_to_bf16(x[i]));
      return;
    case KvFormat::fp8_e4m3:
    case KvFormat::fp8_e5m2:
    case KvFormat::fp8_e4m3fnuz:
      for (int i = 0; i < head_dim; ++i) dst[i] = f32_to_fp8(rn_div(x[i], tensor_scale), fp8_kind(f));
      return;
    case KvFormat::int8_pth: {
      const float scale = rn_div(row_abs_max(x, head_dim), 127.0f);
      store_f32(dst, scale);
      for (int i = 0; i < head_dim; ++i)
        dst[4 + i] = static_cast<uint8_t>(static_cast<int8_t>(scale == 0.0f ? 0 : round_clamp(rn_div(x[i], scale), -127, 127)));
      return;
    }
    case KvFormat::fp8_pth: {
      const float scale = rn_div(row_abs_max(x, head_dim), 448.0f);
      store_f32(dst, scale);
      for (int i = 0; i < head_dim; ++i) dst[4 + i] = scale == 0.0f ? 0 : f32_to_fp8(rn_div(x[i], scale), Fp8Kind::e4m3fn);
      return;
    }
    case KvFormat::int4_pth: {
      const float scale = rn_div(row_abs_max(x, head_dim), 7.0f);
      store_f32(dst, scale);
      for (int i = 0; i + 1 < head_dim; i += 2) {
        const int lo = scale == 0.0f ? 0 : round_clamp(rn_div(x[i], scale), -8, 7);
        const int hi = scale == 0.0f ? 0 : round_clamp(rn_div(x[i + 1], scale), -8, 7);
        dst[4 + i / 2] = static_cast<uint8_t>((lo + 8) | ((hi + 8) << 4));
      }
      return;
    }
    case KvFormat::u2:
    case KvFormat::u3:
    case KvFormat::u4:
    case KvFormat::u8:
      encode_uniform(uniform_bits(f), head_dim, x, dst);
      return;
    case KvFormat::nvfp4:
      encode_nvfp4(tensor_scale, head_dim, x, dst);
      return;
    case KvFormat::q8_0:
    case KvFormat::q5_0:
    case KvFormat::q5_1:
    case KvFormat::q4_0:
    case KvFormat::q4_1:
    case KvFormat::iq4_nl: {
      float rotated[kTqMaxHeadDim];
      if (rot) {
        rotate_forward(*rot, head_dim, x, rotated);
        x = rotated;
      }
      for (int blk = 0; blk < head_dim / kGgmlBlock; ++blk) {
        const float* bx = x + blk * kGgmlBlock;
        uint8_t* bd = dst + blk * ggml_block_bytes(f);
        switch (f) {
          case KvFormat::q8_0: encode_q8_0(bx, bd); break;
          case KvFormat::q5_0: encode_q5_0(bx, bd); break;
          case KvFormat::q5_1: encode_q5_1(bx, bd); break;
          case KvFormat::q4_0: encode_q4_0(bx, bd); break;
          case KvFormat::q4_1: encode_q4_1(bx, bd); break;
          default: encode_iq4_nl(bx, bd); break;
        }
      }
      return;
    }
  }
}

// Element i of a row, as the CPU codec's dequantize_ref computes it (tq{b} and rotated ggml rows:
// in the rotated basis, as dequantize_stored_ref).
KVGATE_HD float decode_element(KvFormat f, const uint8_t* row, int i, float tensor_scale, const TqParams* tq = nullptr,
                               int sub = 0, int head_dim = 0) {
  switch (f) {
    case KvFormat::f32: return load_f32(row + 4 * i);
    case KvFormat::kivi2_v:
    case KvFormat::kivi4_v: {
      const uint8_t* scales = row + 4 * (i / kKiviValueChannelGroup);
      const int groups = head_dim / kKiviValueChannelGroup;
      return rn_add(rn_mul(static_cast<float>(kivi_code_at(row + 4 * groups, i, kivi_bits(f))), f16_to_f32(load_u16(scales))),
                    f16_to_f32(load_u16(scales + 2)));
    }
    case KvFormat::kivi2_k:
    case KvFormat::kivi4_k: {  // token `sub` of the group at `row`
      const size_t d = static_cast<size_t>(head_dim);
      return rn_add(rn_mul(static_cast<float>(kivi_code_at(row + 4 * d, sub * d + i, kivi_bits(f))),
                           f16_to_f32(load_u16(row + 2 * i))),
                    f16_to_f32(load_u16(row + 2 * (d + i))));
    }
    case KvFormat::tq1:
    case KvFormat::tq2:
    case KvFormat::tq3:
    case KvFormat::tq4:
    case KvFormat::tq2_5:
    case KvFormat::tq3_5:
      return rn_mul(f16_to_f32(load_u16(row)), tq_centroid(*tq, i, tq_code(*tq, row + 2, i)));
    case KvFormat::tqprod2:
    case KvFormat::tqprod3:
    case KvFormat::tqprod4: return tqprod_element(*tq, head_dim, row, i);
    case KvFormat::f16: return f16_to_f32(load_u16(row + 2 * i));
    case KvFormat::bf16: return bf16_to_f32(load_u16(row + 2 * i));
    case KvFormat::fp8_e4m3:
    case KvFormat::fp8_e5m2:
    case KvFormat::fp8_e4m3fnuz: return rn_mul(fp8_to_f32(row[i], fp8_kind(f)), tensor_scale);
    case KvFormat::int8_pth: return rn_mul(static_cast<float>(static_cast<int8_t>(row[4 + i])), load_f32(row));
    case KvFormat::fp8_pth: return rn_mul(fp8_to_f32(row[4 + i], Fp8Kind::e4m3fn), load_f32(row));
    case KvFormat::int4_pth: {
      const uint8_t b = row[4 + i / 2];
      return rn_mul(static_cast<float>(((i & 1) ? (b >> 4) : (b & 0x0f)) - 8), load_f32(row));
    }
    case KvFormat::u2:
    case KvFormat::u3:
    case KvFormat::u4:
    case KvFormat::u8:
      return rn_add(rn_mul(static_cast<float>(uniform_code(row + 4, i, uniform_bits(f))), f16_to_f32(load_u16(row))),
                    f16_to_f32(load_u16(row + 2)));
    case KvFormat::nvfp4: return nvfp4_element(row, i, tensor_scale);
    case KvFormat::q8_0:
    case KvFormat::q5_0:
    case KvFormat::q5_1:
    case KvFormat::q4_0:
    case KvFormat::q4_1:
    case KvFormat::iq4_nl: break;
  }
  const uint8_t* b = row + (i / kGgmlBlock) * ggml_block_bytes(f);
  const int j = i % kGgmlBlock;
  const float d = f16_to_f32(load_u16(b));
  if (f == KvFormat::q8_0) return rn_mul(static_cast<float>(static_cast<int8_t>(b[2 + j])), d);
  const float m = f == KvFormat::q4_1 || f == KvFormat::q5_1 ? f16_to_f32(load_u16(b + 2)) : 0.0f;
  return ggml_value(f, ggml_code(f, b, j), d, m);
}

// Elements [i0, i0 + n) of a row (n <= N; y[k] = 0 for k >= n), each equal to decode_element's.
// i0 is a multiple of N and N divides 16, so a span lies inside one ggml or nvfp4 block and the
// row or block scale is read once: the attention kernels decode their rows through this.
template <int N>
KVGATE_HD void decode_span(KvFormat f, const uint8_t* row, int i0, int n, float tensor_scale, float* y,
                           const TqParams* tq = nullptr, int sub = 0, int head_dim = 0) {
  static_assert(kNvfp4Block % N == 0, "a span must not straddle an nvfp4 or ggml block");
  switch (f) {
    case KvFormat::f32:
      KVGATE_UNROLL
      for (int k = 0; k < N; ++k) y[k] = k < n ? load_f32(row + 4 * (i0 + k)) : 0.0f;
      return;
    case KvFormat::kivi2_k:
    case KvFormat::kivi4_k:
    case KvFormat::kivi2_v:
    case KvFormat::kivi4_v:
    case KvFormat::tqprod2:  // attention scores these with tqprod_spans instead
    case KvFormat::tqprod3:
    case KvFormat::tqprod4:
      KVGATE_UNROLL
      for (int k = 0; k < N; ++k) y[k] = k < n ? decode_element(f, row, i0 + k, tensor_scale, tq, sub, head_dim) : 0.0f;
      return;
    case KvFormat::tq1:
    case KvFormat::tq2:
    case KvFormat::tq3:
    case KvFormat::tq4:
    case KvFormat::tq2_5:
    case KvFormat::tq3_5: {
      const float norm = f16_to_f32(load_u16(row));
      KVGATE_UNROLL
      for (int k = 0; k < N; ++k)
        y[k] = k < n ? rn_mul(norm, tq_centroid(*tq, i0 + k, tq_code(*tq, row + 2, i0 + k))) : 0.0f;
      return;
    }
    case KvFormat::f16:
      KVGATE_UNROLL
      for (int k = 0; k < N; ++k) y[k] = k < n ? f16_to_f32(load_u16(row + 2 * (i0 + k))) : 0.0f;
      return;
    case KvFormat::bf16:
      KVGATE_UNROLL
      for (int k = 0; k < N; ++k) y[k] = k < n ? bf16_to_f32(load_u16(row + 2 * (i0 + k))) : 0.0f;
      return;
    case KvFormat::fp8_e4m3:
    case KvFormat::fp8_e5m2:
    case KvFormat::fp8_e4m3fnuz: {
      const Fp8Kind kind = fp8_kind(f);
      KVGATE_UNROLL
      for (int k = 0; k < N; ++k) y[k] = k < n ? rn_mul(fp8_to_f32(row[i0 + k], kind), tensor_scale) : 0.0f;
      return;
    }
    case KvFormat::int8_pth: {
      const float s = load_f32(row);
      KVGATE_UNROLL
      for (int k = 0; k < N; ++k) y[k] = k < n ? rn_mul(static_cast<float>(static_cast<int8_t>(row[4 + i0 + k])), s) : 0.0f;
      return;
    }
    case KvFormat::fp8_pth: {
      const float s = load_f32(row);
      KVGATE_UNROLL
      for (int k = 0; k < N; ++k) y[k] = k < n ? rn_mul(fp8_to_f32(row[4 + i0 + k], Fp8Kind::e4m3fn), s) : 0.0f;
      return;
    }
    case KvFormat::int4_pth: {
      const float s = load_f32(row);
      KVGATE_UNROLL
      for (int k = 0; k < N; ++k) {
        const int i = i0 + k;
        const uint8_t b = row[4 + i / 2];
        y[k] = k < n ? rn_mul(static_cast<float>(((i & 1) ? (b >> 4) : (b & 0x0f)) - 8), s) : 0.0f;
      }
      return;
    }
    case KvFormat::u2:
    case KvFormat::u3:
    case KvFormat::u4:
    case KvFormat::u8: {
      const float s = f16_to_f32(load_u16(row)), z = f16_to_f32(load_u16(row + 2));
      const int bits = uniform_bits(f);
      KVGATE_UNROLL
      for (int k = 0; k < N; ++k)
        y[k] = k < n ? rn_add(rn_mul(static_cast<float>(uniform_code(row + 4, i0 + k, bits)), s), z) : 0.0f;
      return;
    }
    case KvFormat::nvfp4: {
      const uint8_t* b = row + (i0 / kNvfp4Block) * kNvfp4BlockBytes;
      const float s = fp8_to_f32(b[0], Fp8Kind::e4m3fn);
      KVGATE_UNROLL
      for (int k = 0; k < N; ++k) {
        const int j = i0 % kNvfp4Block + k;
        const uint8_t packed = b[1 + j / 2];
        y[k] = k < n ? rn_mul(rn_mul(e2m1_value((j & 1) ? packed >> 4 : packed & 0x0f), s), tensor_scale) : 0.0f;
      }
      return;
    }
    case KvFormat::q8_0:
    case KvFormat::q5_0:
    case KvFormat::q5_1:
    case KvFormat::q4_0:
    case KvFormat::q4_1:
    case KvFormat::iq4_nl: break;
  }
  const uint8_t* b = row + (i0 / kGgmlBlock) * ggml_block_bytes(f);
  const int j0 = i0 % kGgmlBlock;
  const float d = f16_to_f32(load_u16(b));
  if (f == KvFormat::q8_0) {
    KVGATE_UNROLL
    for (int k = 0; k < N; ++k) y[k] = k < n ? rn_mul(static_cast<float>(static_cast<int8_t>(b[2 + j0 + k])), d) : 0.0f;
    return;
  }
  const float m = f == KvFormat::q4_1 || f == KvFormat::q5_1 ? f16_to_f32(load_u16(b + 2)) : 0.0f;
  KVGATE_UNROLL
  for (int k = 0; k < N; ++k) y[k] = k < n ? ggml_value(f, ggml_code(f, b, j0 + k), d, m) : 0.0f;
}

KVGATE_HD void decode_row(KvFormat f, int head_dim, float tensor_scale, const uint8_t* row, float* y,
                          const TqParams* tq = nullptr, int sub = 0) {
  for (int i = 0; i < head_dim; ++i) y[i] = decode_element(f, row, i, tensor_scale, tq, sub, head_dim);
}

}  // namespace kvgate::kernels::gpu
