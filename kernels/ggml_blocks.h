#pragma once
// ggml's quantization blocks, byte for byte as ggml-common.h lays them out, with their element
// decoders and (for the KV cache types) their quantizers, written once for every user: the CPU
// KV codecs (kernels/formats_ggml.cc), the GPU KV rows (kernels/gpu/rows_ggml.h), the CPU weight
// decode (runtime/weights.cc), the GPU weight decode (kernels/gpu/weight_blocks.h) and the GGUF
// reader's block sizes (runtime/gguf.cc). Host and device compile the same functions
// (KVGATE_HD), with every rounding step spelled out (rn_* in core/host_device.h), so the GPU
// stores and reads exactly the CPU's bits. Plain C++17 for the device compilers.
//
// Layouts: little-endian fp16 scales first, then the high bits (q5), then the packed nibbles or
// bytes. In the 32-element blocks with nibbles, element j sits in the low nibble of qs[j] and
// element j + 16 in its high nibble. A row is its blocks back to back, so fields are unaligned:
// everything is read byte by byte.
#include <cfloat>
#include <climits>
#include <cstddef>
#include <cstdint>

#include "core/float_convert.h"
#include "core/host_device.h"

namespace kvgate::kernels::ggml {

inline constexpr int kBlock = 32;        // QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0 = QK4_NL = QK_MXFP4
inline constexpr int kSuperBlock = 256;  // QK_K

struct BlockQ8_0 {
  uint16_t d;      // fp16 scale
  int8_t qs[32];   // x = qs * d
};
// The query side of ggml's dot products (vec_dot_type of q4_1 and q5_1): q8_0 plus s = d * sum(qs).
struct BlockQ8_1 {
  uint16_t d;      // fp16 scale
  uint16_t s;      // fp16 d * sum(qs)
  int8_t qs[32];   // x = qs * d
};
struct BlockQ4_0 {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // x = (q - 8) * d
};
struct BlockQ4_1 {
  uint16_t d;      // fp16 scale
  uint16_t m;      // fp16 minimum; x = q * d + m
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];   // bit j of the little-endian u32 = 5th bit of element j
  uint8_t qs[16];  // low 4 bits; x = (q - 16) * d
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];  // x = q * d + m
};
struct BlockIQ4_NL {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // 4-bit indices into the iq4_nl grid; x = d * grid[i]
};
struct BlockMXFP4 {
  uint8_t e;       // E8M0 shared exponent: 2^(e - 127)
  uint8_t qs[16];  // E2M1 codes; x = fp4[q] * 2^(e - 128) (the fp4 table holds doubled values)
};
struct BlockQ4_K {
  uint16_t d;           // fp16 super-block scale of the 6-bit scales
  uint16_t dmin;        // fp16 super-block scale of the 6-bit minima
  uint8_t scales[12];   // eight (scale, min) pairs of 6 bits
  uint8_t qs[128];      // 4 runs of 64: 32 low nibbles, then 32 high nibbles
};
struct BlockQ6_K {
  uint8_t ql[128];      // low 4 bits
  uint8_t qh[64];       // high 2 bits
  int8_t scales[16];    // 8-bit scales of 16-element sub-blocks
  uint16_t d;           // fp16 super-block scale
};

static_assert(sizeof(BlockQ8_0) == 34, "block_q8_0 is 34 bytes in ggml");
static_assert(sizeof(BlockQ8_1) == 36, "block_q8_1 is 36 bytes in ggml");
static_assert(sizeof(BlockQ4_0) == 18, "block_q4_0 is 18 bytes in ggml");
static_assert(sizeof(BlockQ4_1) == 20, "block_q4_1 is 20 bytes in ggml");
static_assert(sizeof(BlockQ5_0) == 22, "block_q5_0 is 22 bytes in ggml");
static_assert(sizeof(BlockQ5_1) == 24, "block_q5_1 is 24 bytes in ggml");
static_assert(sizeof(BlockIQ4_NL) == 18, "block_iq4_nl is 18 bytes in ggml");
static_assert(sizeof(BlockMXFP4) == 17, "block_mxfp4 is 17 bytes in ggml");
static_assert(sizeof(BlockQ4_K) == 144, "block_q4_K is 144 bytes in ggml");
static_assert(sizeof(BlockQ6_K) == 210, "block_q6_K is 210 bytes in ggml");

// The non-linear 4-bit grid of iq4_nl (kvalues_iq4nl in ggml-common.h).
inline constexpr int8_t kValuesIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// E2M1 values doubled, shared by MXFP4 and NVFP4 (kvalues_fp4): index 8 is +0, not -0.
inline constexpr int8_t kValuesFp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// ---- bytes ----
KVGATE_HD uint32_t u16_at(const uint8_t* p) { return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8); }
KVGATE_HD uint32_t u32_at(const uint8_t* p) { return u16_at(p) | (u16_at(p + 2) << 16); }
KVGATE_HD float half_at(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(u16_at(p))); }
KVGATE_HD void store_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  p[0] = static_cast<uint8_t>(h);
  p[1] = static_cast<uint8_t>(h >> 8);
}
// Nibble j (0..31) of a 16-byte quant array: low nibbles hold elements 0..15.
KVGATE_HD int nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4; }
// The grids packed little-endian into two words, so the device reads them from registers
// instead of an indexed array in local memory.
KVGATE_HD float iq4nl_value(int i) {
  constexpr uint64_t kLow = 0xf6eaddcfbfad9881ull, kHigh = 0x7159453526190d01ull;
  return static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>((i < 8 ? kLow : kHigh) >> (8 * (i & 7)))));
}
KVGATE_HD float fp4_value(int i) {
  constexpr uint64_t kLow = 0x0c08060403020100ull, kHigh = 0xf4f8fafcfdfeff00ull;
  return static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>((i < 8 ? kLow : kHigh) >> (8 * (i & 7)))));
}

// ---- how ggml's x86-64 reference executes its float-to-integer casts ----
// static_cast<int8_t>(float): cvttss2si to 32 bits (NaN and out-of-range give INT_MIN), then the
// low byte. A GPU's own conversion saturates instead, and on other CPUs the cast is undefined.
KVGATE_HD int x86_trunc_to_int8(float v) {
  const int wide = (v >= -2147483648.0f && v < 2147483648.0f) ? static_cast<int>(v) : INT_MIN;
  return static_cast<int8_t>(static_cast<uint8_t>(static_cast<unsigned>(wide) & 0xffu));
}
// static_cast<uint8_t>(float): the same 32-bit conversion, then the low byte.
KVGATE_HD int x86_trunc_to_uint8(float v) { return x86_trunc_to_int8(v) & 0xff; }

// ---- 32-element blocks: decode ----
// Each type reads its block header once (Scale) and decodes element j from it; element() and
// dequantize() are the two ways callers use that, so both give the same bits.
template <class T>
struct ScaledBlock {
  KVGATE_HD static float element(const uint8_t* b, int j) { return T::value(b, j, T::scale(b)); }
  KVGATE_HD static void dequantize(const uint8_t* b, float* y) {
    const typename T::Scale s = T::scale(b);
    for (int j = 0; j < kBlock; ++j) y[j] = T::value(b, j, s);
  }
};

struct Q8_0 : ScaledBlock<Q8_0> {
  static constexpr int kElems = kBlock;
  static constexpr int kBytes = sizeof(BlockQ8_0);
  struct Scale {
    float d;
  };
  KVGATE_HD static Scale scale(const uint8_t* b) { return {half_at(b)}; }
  KVGATE_HD static float value(const uint8_t* b, int j, Scale s) {
    return rn_mul(static_cast<float>(static_cast<int8_t>(b[2 + j])), s.d);
  }
  KVGATE_HD static void quantize(const float* x, uint8_t* b);
  // As ggml-cpu's x86 (AVX2) quantize_row_q8_0, which its flash attention uses for the query.
  KVGATE_HD static void quantize_x86(const float* x, uint8_t* b);
};

// Not a KV cache type: the query of llama.cpp's q4_1 and q5_1 dot products.
struct Q8_1 : ScaledBlock<Q8_1> {
  static constexpr int kElems = kBlock;
  static constexpr int kBytes = sizeof(BlockQ8_1);
  struct Scale {
    float d;
  };
  KVGATE_HD static Scale scale(const uint8_t* b) { return {half_at(b)}; }
  KVGATE_HD static float value(const uint8_t* b, int j, Scale s) {
    return rn_mul(static_cast<float>(static_cast<int8_t>(b[4 + j])), s.d);
  }
  KVGATE_HD static float sum(const uint8_t* b) { return half_at(b + 2); }
  // As ggml-cpu's x86 (AVX2) quantize_row_q8_1.
  KVGATE_HD static void quantize_x86(const float* x, uint8_t* b);
};

struct Q4_0 : ScaledBlock<Q4_0> {
  static constexpr int kElems = kBlock;
  static constexpr int kBytes = sizeof(BlockQ4_0);
  struct Scale {
    float d;
  };
  KVGATE_HD static Scale scale(const uint8_t* b) { return {half_at(b)}; }
  KVGATE_HD static float value(const uint8_t* b, int j, Scale s) {
    return rn_mul(static_cast<float>(nibble(b + 2, j) - 8), s.d);
  }
  KVGATE_HD static void quantize(const float* x, uint8_t* b);
};

struct Q4_1 : ScaledBlock<Q4_1> {
  static constexpr int kElems = kBlock;
  static constexpr int kBytes = sizeof(BlockQ4_1);
  struct Scale {
    float d, m;
  };
  KVGATE_HD static Scale scale(const uint8_t* b) { return {half_at(b), half_at(b + 2)}; }
  KVGATE_HD static float value(const uint8_t* b, int j, Scale s) {
    return rn_add(rn_mul(static_cast<float>(nibble(b + 4, j)), s.d), s.m);
  }
  KVGATE_HD static void quantize(const float* x, uint8_t* b);
};

// The 5th bit of element j of a q5 block is bit j of the little-endian u32 qh.
KVGATE_HD int q5_code(const uint8_t* qh, const uint8_t* qs, int j) {
  return nibble(qs, j) | (((qh[j >> 3] >> (j & 7)) & 1) << 4);
}

struct Q5_0 : ScaledBlock<Q5_0> {
  static constexpr int kElems = kBlock;
  static constexpr int kBytes = sizeof(BlockQ5_0);
  struct Scale {
    float d;
  };
  KVGATE_HD static Scale scale(const uint8_t* b) { return {half_at(b)}; }
  KVGATE_HD static float value(const uint8_t* b, int j, Scale s) {
    return rn_mul(static_cast<float>(q5_code(b + 2, b + 6, j) - 16), s.d);
  }
  KVGATE_HD static void quantize(const float* x, uint8_t* b);
};

struct Q5_1 : ScaledBlock<Q5_1> {
  static constexpr int kElems = kBlock;
  static constexpr int kBytes = sizeof(BlockQ5_1);
  struct Scale {
    float d, m;
  };
  KVGATE_HD static Scale scale(const uint8_t* b) { return {half_at(b), half_at(b + 2)}; }
  KVGATE_HD static float value(const uint8_t* b, int j, Scale s) {
    return rn_add(rn_mul(static_cast<float>(q5_code(b + 4, b + 8, j)), s.d), s.m);
  }
  KVGATE_HD static void quantize(const float* x, uint8_t* b);
};

struct IQ4_NL : ScaledBlock<IQ4_NL> {
  static constexpr int kElems = kBlock;
  static constexpr int kBytes = sizeof(BlockIQ4_NL);
  struct Scale {
    float d;
  };
  KVGATE_HD static Scale scale(const uint8_t* b) { return {half_at(b)}; }
  KVGATE_HD static float value(const uint8_t* b, int j, Scale s) { return rn_mul(s.d, iq4nl_value(nibble(b + 2, j))); }
  KVGATE_HD static void quantize(const float* x, uint8_t* b);
};

// GGML_E8M0_TO_FP32_HALF: 2^(e - 128), half the block scale, because the fp4 table is doubled;
// e = 0 and 1 give the subnormals 2^-128 and 2^-127.
KVGATE_HD float e8m0_half(uint32_t e) {
  return f32_from_bits(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

struct MXFP4 : ScaledBlock<MXFP4> {
  static constexpr int kElems = kBlock;
  static constexpr int kBytes = sizeof(BlockMXFP4);
  struct Scale {
    float d;
  };
  KVGATE_HD static Scale scale(const uint8_t* b) { return {e8m0_half(b[0])}; }
  KVGATE_HD static float value(const uint8_t* b, int j, Scale s) { return rn_mul(fp4_value(nibble(b + 1, j)), s.d); }
  KVGATE_HD static void quantize(const float* x, uint8_t* b);
};

// ---- 32-element blocks: quantize, operation for operation as ggml's quantize_row_*_ref ----
// (ggml's x86 AVX2 quantize_row_q8_0 rounds ties to even and uses id = 127/amax, so a CPU-built
// llama.cpp can differ from its reference, and from us, in the last bit of rare ties; ggml's CUDA
// copy kernels follow the reference, as we do.)

KVGATE_HD void Q8_0::quantize(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < kBlock; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = rn_div(amax, 127.0f);
  const float id = d != 0.0f ? rn_div(1.0f, d) : 0.0f;
  store_half(b, d);
  for (int j = 0; j < kBlock; ++j) b[2 + j] = static_cast<uint8_t>(x86_trunc_to_int8(roundf(rn_mul(x[j], id))));
}

// ggml-cpu's x86 quantize_row_q8_0/q8_1 (arch/x86/quants.c): d = amax / 127 but the codes use
// id = 127 / amax (not 1 / d), _mm256_round_ps rounds ties to even, and the int32 -> int8 packs
// saturate (a NaN becomes INT_MIN, then -128). Returns the codes' sum (q8_1's s).
KVGATE_HD int quantize_q8_x86(const float* x, float& d, int8_t* q) {
  float amax = 0.0f;
  for (int j = 0; j < kBlock; ++j) amax = fmaxf(amax, fabsf(x[j]));
  d = rn_div(amax, 127.0f);
  const float id = amax != 0.0f ? rn_div(127.0f, amax) : 0.0f;
  unsigned sum = 0;  // int32 lanes added as the AVX2 code does, wrapping
  for (int j = 0; j < kBlock; ++j) {
    const float r = rintf(rn_mul(x[j], id));
    const int v = (r >= -2147483648.0f && r < 2147483648.0f) ? static_cast<int>(r) : INT_MIN;
    q[j] = static_cast<int8_t>(v < -128 ? -128 : v > 127 ? 127 : v);
    sum += static_cast<unsigned>(v);
  }
  return static_cast<int>(sum);
}

KVGATE_HD void Q8_0::quantize_x86(const float* x, uint8_t* b) {
  float d;
  int8_t q[kBlock];
  quantize_q8_x86(x, d, q);
  store_half(b, d);
  for (int j = 0; j < kBlock; ++j) b[2 + j] = static_cast<uint8_t>(q[j]);
}

KVGATE_HD void Q8_1::quantize_x86(const float* x, uint8_t* b) {
  float d;
  int8_t q[kBlock];
  const int sum = quantize_q8_x86(x, d, q);
  store_half(b, d);
  store_half(b + 2, rn_mul(d, static_cast<float>(sum)));
  for (int j = 0; j < kBlock; ++j) b[4 + j] = static_cast<uint8_t>(q[j]);
}

// The query of llama.cpp's CUDA vector flash attention for quantized keys (fattn-common.cuh
// quantize_q8_1_to_shared): per 32 elements d = amax / 127 kept in f32, q = roundf(x / d); y is
// what the int8 dot products see, q * d.
KVGATE_HD void q8_1_cuda_fattn_values(const float* x, float* y) {
  float amax = 0.0f;
  for (int j = 0; j < kBlock; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = rn_div(amax, 127.0f);
  for (int j = 0; j < kBlock; ++j)
    y[j] = d != 0.0f ? rn_mul(static_cast<float>(static_cast<int8_t>(roundf(rn_div(x[j], d)))), d) : 0.0f;
}

// "The signed value of the first element with the largest magnitude" (q4_0, q5_0).
KVGATE_HD float signed_abs_max(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    if (amax < fabsf(x[j])) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  return max;
}

KVGATE_HD void Q4_0::quantize(const float* x, uint8_t* b) {
  const float d = rn_div(signed_abs_max(x), -8.0f);
  const float id = d != 0.0f ? rn_div(1.0f, d) : 0.0f;
  store_half(b, d);
  for (int j = 0; j < 16; ++j) {
    const int lo = x86_trunc_to_int8(rn_add(rn_mul(x[j], id), 8.5f));
    const int hi = x86_trunc_to_int8(rn_add(rn_mul(x[16 + j], id), 8.5f));
    b[2 + j] = static_cast<uint8_t>((lo < 15 ? lo : 15) | ((hi < 15 ? hi : 15) << 4));
  }
}

// The header q4_1 and q5_1 share: d = (max - min) / levels and the minimum, as fp16, in the
// first 4 bytes; lo and id (1/d, 0 for a flat block) for the codes.
KVGATE_HD void store_min_scale(const float* x, float levels, uint8_t* b, float& lo, float& id) {
  float hi = -FLT_MAX;
  lo = FLT_MAX;
  for (int j = 0; j < kBlock; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  const float d = rn_div(rn_sub(hi, lo), levels);
  id = d != 0.0f ? rn_div(1.0f, d) : 0.0f;
  store_half(b, d);
  store_half(b + 2, lo);
}

KVGATE_HD void Q4_1::quantize(const float* x, uint8_t* b) {
  float lo, id;
  store_min_scale(x, 15.0f, b, lo, id);
  for (int j = 0; j < 16; ++j) {
    const int c0 = x86_trunc_to_int8(rn_add(rn_mul(rn_sub(x[j], lo), id), 0.5f));
    const int c1 = x86_trunc_to_int8(rn_add(rn_mul(rn_sub(x[16 + j], lo), id), 0.5f));
    b[4 + j] = static_cast<uint8_t>((c0 < 15 ? c0 : 15) | ((c1 < 15 ? c1 : 15) << 4));
  }
}

// A 5-bit code into a zeroed q5 block: the low nibble as q4_0 packs it, the 5th bit in bit j
// of the little-endian u32 qh.
KVGATE_HD void put_q5(uint8_t* qh, uint8_t* qs, int j, int code) {
  qs[j & 15] |= static_cast<uint8_t>((code & 0x0f) << (j < 16 ? 0 : 4));
  qh[j >> 3] |= static_cast<uint8_t>(((code >> 4) & 1) << (j & 7));
}

KVGATE_HD void Q5_0::quantize(const float* x, uint8_t* b) {
  const float d = rn_div(signed_abs_max(x), -16.0f);
  const float id = d != 0.0f ? rn_div(1.0f, d) : 0.0f;
  store_half(b, d);
  for (int k = 2; k < kBytes; ++k) b[k] = 0;
  for (int j = 0; j < kBlock; ++j) {
    const int c = x86_trunc_to_uint8(rn_add(rn_mul(x[j], id), 16.5f));  // (uint8_t)(int8_t)v on x86
    put_q5(b + 2, b + 6, j, c < 31 ? c : 31);
  }
}

// q5_1 keeps the low 5 bits of the code without a clamp, as ggml does.
KVGATE_HD void Q5_1::quantize(const float* x, uint8_t* b) {
  float lo, id;
  store_min_scale(x, 31.0f, b, lo, id);
  for (int k = 4; k < kBytes; ++k) b[k] = 0;
  for (int j = 0; j < kBlock; ++j)
    put_q5(b + 4, b + 8, j, x86_trunc_to_uint8(rn_add(rn_mul(rn_sub(x[j], lo), id), 0.5f)));
}

// best_index_int8: bisection to the nearest grid value, a tie to the upper one (NaN ends on 15,
// as every comparison fails).
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

// quantize_row_iq4_nl_ref = quantize_row_iq4_nl_impl(32, 32, ..., ntry = -1): indices from the
// signed-max scale, then the x^2-weighted least-squares scale for those indices without
// re-picking them. A block below GROUP_MAX_EPS (1e-15) stores d = 0; ggml leaves its indices
// unspecified, we store 0.
KVGATE_HD void IQ4_NL::quantize(const float* x, uint8_t* b) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    const float ax = fabsf(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  for (int k = 0; k < kBytes; ++k) b[k] = 0;  // also the fp16 of 0.0f
  if (amax < 1e-15f) return;
  const float d0 = rn_div(max, iq4nl_value(0));
  const float id = rn_div(1.0f, d0);
  float sumqx = 0.0f, sumq2 = 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    const float w = rn_mul(x[j], x[j]);
    const int idx = best_index_iq4nl(rn_mul(id, x[j]));
    const float q = iq4nl_value(idx);
    sumqx = rn_add(sumqx, rn_mul(rn_mul(w, q), x[j]));
    sumq2 = rn_add(sumq2, rn_mul(rn_mul(w, q), q));
    b[2 + (j & 15)] |= static_cast<uint8_t>(idx << (j < 16 ? 0 : 4));
  }
  store_half(b, rn_div(sumqx, sumq2));
}

// floorf(log2f(a)) for a finite a > 0, as a correctly rounded log2f gives it (and glibc's does:
// tests/kernels/mxfp4_test.cc compares the two near every power of two). It is the binary
// exponent E of a, except that log2(a) for a just below 2^(E+1) lies within half a float step
// of E + 1 and rounds up to it. Computed from the bits, because the CPU's and the GPU's log2f
// round differently: a = 2^k (1 - t) rounds up to k when -log2(1 - t) < h, half the distance
// from k to the next float toward -inf, i.e. when t < 1 - 2^-h = h ln2 (1 - h ln2 / 2 + ...).
// t is exact in double, and the truncated series is accurate to ~1e-11 relative, far inside the
// margin (the thresholds sit between multiples of the float step of a).
KVGATE_HD double f64_pow2(int e) {  // 2^e for a normal double exponent
  const uint64_t bits = static_cast<uint64_t>(e + 1023) << 52;
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}
KVGATE_HD int floor_log2f(float a) {
  const uint32_t bits = f32_bits(a);
  const int field = static_cast<int>((bits >> 23) & 0xffu);
  int e = field - 127;
  if (field == 0) {  // subnormal: 2^-149 times the mantissa
    uint32_t m = bits & 0x7fffffu;
    for (e = -127; !(m & 0x400000u); m <<= 1) --e;
  }
  const int k = e + 1;
  if (k == 0) return e;  // floats next to 0 are far finer than any step below 1
  const int n = k > 0 ? k : -k;
  int p = 0;
  while ((2 << p) <= n) ++p;
  // Below a positive power of two the floats are twice as dense as above it.
  const double h = f64_pow2(k > 0 && n == (1 << p) ? p - 25 : p - 24);
  const double t = 1.0 - static_cast<double>(a) * f64_pow2(-k);
  const double ln2 = 0.693147180559945309417232121458;
  return t < h * ln2 * (1.0 - 0.5 * h * ln2) ? k : e;
}

// The shared exponent of quantize_row_mxfp4_ref: (uint8_t)(floorf(log2f(amax)) - 2 + 127), 0
// for an all-zero block. The float-to-uint8 conversion is x86's (a block whose amax is below
// 2^-125 wraps to a huge scale and stores all-zero codes; an infinite amax gives 0).
KVGATE_HD uint8_t mxfp4_exponent(float amax) {
  if (!(amax > 0.0f)) return 0;
  if (amax > FLT_MAX) return 0;  // cvttss2si of +inf gives INT_MIN, whose low byte is 0
  return static_cast<uint8_t>((floor_log2f(amax) - 2 + 127) & 0xff);
}

// best_index_mxfp4: the grid value nearest x at scale d, measured as |fp4[i] * d - x| with one
// rounding; the first of equals wins (so -0 never replaces +0, and NaN gives index 0).
KVGATE_HD int best_index_mxfp4(float x, float d) {
  int best = 0;
  float best_err = fabsf(rn_sub(rn_mul(fp4_value(0), d), x));
  for (int i = 1; i < 16; ++i) {
    const float err = fabsf(rn_sub(rn_mul(fp4_value(i), d), x));
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

KVGATE_HD void MXFP4::quantize(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < kBlock; ++j)
    if (amax < fabsf(x[j])) amax = fabsf(x[j]);
  b[0] = mxfp4_exponent(amax);
  const float d = e8m0_half(b[0]);
  for (int j = 0; j < 16; ++j)
    b[1 + j] = static_cast<uint8_t>(best_index_mxfp4(x[j], d) | (best_index_mxfp4(x[16 + j], d) << 4));
}

// ---- 256-element super-blocks (weights only) ----

// Q4_K's 12 scale bytes pack eight 6-bit (scale, min) pairs.
KVGATE_HD void q4k_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

struct Q4_K {
  static constexpr int kElems = kSuperBlock;
  static constexpr int kBytes = sizeof(BlockQ4_K);
  // d * sc * q - dmin * m, as dequantize_row_q4_K orders it.
  KVGATE_HD static float value(float d, float dmin, int sc, int m, int code) {
    return rn_sub(rn_mul(rn_mul(d, static_cast<float>(sc)), static_cast<float>(code)), rn_mul(dmin, static_cast<float>(m)));
  }
  // Element j: 4 runs of 64, each 32 low nibbles then 32 high ones, 8 sub-blocks of 32.
  KVGATE_HD static float element(const uint8_t* b, int j) {
    const int run = j / 64, within = j % 64;
    int sc, m;
    q4k_scale_min(2 * run + (within >= 32 ? 1 : 0), b + 4, sc, m);
    const uint8_t q = b[16 + 32 * run + within % 32];
    return value(half_at(b), half_at(b + 2), sc, m, within < 32 ? q & 0x0f : q >> 4);
  }
  KVGATE_HD static void dequantize(const uint8_t* b, float* y) {
    const float d = half_at(b), dmin = half_at(b + 2);
    const uint8_t* q = b + 16;
    for (int is = 0; is < 8; is += 2, q += 32) {
      int sc0, m0, sc1, m1;
      q4k_scale_min(is, b + 4, sc0, m0);
      q4k_scale_min(is + 1, b + 4, sc1, m1);
      for (int l = 0; l < 32; ++l) *y++ = value(d, dmin, sc0, m0, q[l] & 0x0f);
      for (int l = 0; l < 32; ++l) *y++ = value(d, dmin, sc1, m1, q[l] >> 4);
    }
  }
};

struct Q6_K {
  static constexpr int kElems = kSuperBlock;
  static constexpr int kBytes = sizeof(BlockQ6_K);
  // d * scale * q, as dequantize_row_q6_K orders it; q is the 6-bit code minus 32.
  KVGATE_HD static float value(float d, const uint8_t* b, int scale_index, int code) {
    return rn_mul(rn_mul(d, static_cast<float>(static_cast<int8_t>(b[192 + scale_index]))), static_cast<float>(code));
  }
  // Element j: two halves of 128, each four runs of 32 sharing ql/qh; one scale per 16.
  KVGATE_HD static float element(const uint8_t* b, int j) {
    const int half = j / 128, run = (j % 128) / 32, l = j % 32;
    const uint8_t* ql = b + 64 * half;
    const uint8_t* qh = b + 128 + 32 * half;
    const int low = run == 0 ? ql[l] & 0x0f : run == 1 ? ql[l + 32] & 0x0f : run == 2 ? ql[l] >> 4 : ql[l + 32] >> 4;
    return value(half_at(b + 208), b, 8 * half + l / 16 + 2 * run, (low | (((qh[l] >> (2 * run)) & 3) << 4)) - 32);
  }
  KVGATE_HD static void dequantize(const uint8_t* b, float* y) {
    const float d = half_at(b + 208);
    for (int half = 0; half < 2; ++half, y += 128) {
      const uint8_t* ql = b + 64 * half;
      const uint8_t* qh = b + 128 + 32 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = 8 * half + l / 16;
        y[l] = value(d, b, is, ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32);
        y[l + 32] = value(d, b, is + 2, ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32);
        y[l + 64] = value(d, b, is + 4, ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        y[l + 96] = value(d, b, is + 6, ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
  }
};

// ---- the input side of ggml-cpu's matrix products ----
// ggml-cpu's mul_mat converts its f32 input to the weights' vec_dot_type before the dot
// (ggml-cpu.c type_traits_cpu). kvgate rounds the input the same way under @engine=llama.cpp,
// on the CPU (runtime/weights.h round_input_like_llama_cpp) and the GPU (kernels/gpu/gpu_ops.h)
// alike, through round_dot_input.
enum class DotInput : uint8_t { f32, f16, bf16, q8_0, q8_1, q8_k };

// Elements one rounding unit covers: a q8 block, a q8_K super-block, or one element.
KVGATE_HD int dot_input_block(DotInput t) {
  switch (t) {
    case DotInput::q8_0:
    case DotInput::q8_1: return kBlock;
    case DotInput::q8_k: return kSuperBlock;
    default: return 1;
  }
}

// ggml's quantize_row_q8_K_ref for one super-block, as the dot products see it: per 256,
// iscale = -127 / (the entry of largest magnitude), codes nearest_int(iscale * x) (ties to
// even) capped at 127, d = 1 / iscale; y = code * d. y may equal x.
KVGATE_HD void q8_k_values(const float* x, float* y) {
  float max = 0.0f, amax = 0.0f;
  for (int j = 0; j < kSuperBlock; ++j) {
    if (fabsf(x[j]) > amax) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  if (amax == 0.0f) {
    for (int j = 0; j < kSuperBlock; ++j) y[j] = 0.0f;
    return;
  }
  const float iscale = rn_div(-127.0f, max);
  const float d = rn_div(1.0f, iscale);
  for (int j = 0; j < kSuperBlock; ++j) {
    const float code = rintf(rn_mul(iscale, x[j]));
    y[j] = rn_mul(code < 127.0f ? code : 127.0f, d);  // std::min(127, code): a NaN code becomes 127
  }
}

// One unit of dot_input_block(t) elements, in place, as ggml-cpu converts it: q8_0/q8_1 as its
// x86 (AVX2) quantize_row_q8_0/q8_1 (id = 127/amax, ties to even), q8_K as the reference.
KVGATE_HD void round_dot_input(DotInput t, float* x) {
  uint8_t block[Q8_1::kBytes];
  switch (t) {
    case DotInput::f32: return;
    case DotInput::f16: x[0] = f16_to_f32(f32_to_f16(x[0])); return;
    case DotInput::bf16: x[0] = bf16_to_f32(f32_to_bf16(x[0])); return;
    case DotInput::q8_0:
      Q8_0::quantize_x86(x, block);
      Q8_0::dequantize(block, x);
      return;
    case DotInput::q8_1:
      Q8_1::quantize_x86(x, block);
      Q8_1::dequantize(block, x);
      return;
    case DotInput::q8_k: q8_k_values(x, x); return;
  }
}

}  // namespace kvgate::kernels::ggml
