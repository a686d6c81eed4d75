#pragma once
// Quantized weights as the GPU keeps them: repacked once at upload (repack_planes) into a quant
// plane of 16-byte units and a meta plane (weight_blocks.h plane_layout), so the decode GEMV
// (gpu_gemv.cu) streams the quants with 128-bit loads; ggml's own rows (18-byte q4_0 blocks,
// 210-byte q6_K ones) are not 16-byte aligned block by block.
//
// Two readers, both host and device code (tests/runtime/gpu_weight_planes_test.cc runs them on
// the host):
//   - plane_element: element i of a row, bit for bit the ggml decoder's value (the tiled GEMM,
//     the f16 tiles of the prefill GEMM and the embedding lookup use it);
//   - Units<T>: the GEMV's view. A row is a sequence of units (kUnitBytes of quants, kUnitElems
//     elements, a fixed set of the block's elements); dot() adds one unit's product with x to an
//     f32 accumulator, with the block (or sub-block) scale applied once to the sum of code * x
//     rather than to each element: the same product to f32 rounding, about half the
//     instructions per element, which is what lets a 4-bit GEMV keep up with the memory.
// Codes become floats by the exponent trick (0x4B000000 | c is 2^23 + c): exact, and a logic op
// plus an add where the int-to-float conversion runs at a quarter of the FMA rate.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/float_convert.h"
#include "core/host_device.h"
#include "kernels/ggml_blocks.h"
#include "kernels/gpu/weight_blocks.h"

namespace kvgate::kernels::gpu {

// ---- layout ----

// Bytes of one row in each plane (cols whole blocks).
inline size_t quant_row_bytes(WeightType t, int64_t cols) {
  return static_cast<size_t>(cols / weight_block_elems(t)) * static_cast<size_t>(plane_layout(t).quant_bytes);
}
inline size_t meta_row_bytes(WeightType t, int64_t cols) {
  return static_cast<size_t>(cols / weight_block_elems(t)) * static_cast<size_t>(plane_layout(t).meta_bytes);
}

// Q6_K's quant plane, per block: four units of 48 bytes, unit k = 2 * half + (l0 / 16) holding
// ql[64 half + l0 ..+16], ql[64 half + 32 + l0 ..+16], qh[32 half + l0 ..+16] for l0 in {0, 16}:
// the low and high bits of elements 128 half + 32 run + l0 + i (run 0..3, i < 16).
inline constexpr int kQ6kUnitBytes = 48;

// rows x cols of ggml rows (row_bytes apart) into the two planes (quant_row_bytes and
// meta_row_bytes per row, rows back to back). Host code, once per weight at upload.
inline void repack_planes(WeightType t, const uint8_t* src, int64_t rows, int64_t cols, size_t row_bytes, uint8_t* quants,
                          uint8_t* meta) {
  const PlaneLayout L = plane_layout(t);
  const int64_t blocks = cols / weight_block_elems(t);
  const int bb = weight_block_bytes(t);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = src + static_cast<size_t>(r) * row_bytes;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* in = row + b * bb;
      uint8_t* q = quants + static_cast<size_t>(r * blocks + b) * L.quant_bytes;
      uint8_t* m = meta + static_cast<size_t>(r * blocks + b) * L.meta_bytes;
      if (t == WeightType::q6_k) {
        for (int k = 0; k < 4; ++k) {
          const int half = k / 2, l0 = 16 * (k % 2);
          std::memcpy(q + k * kQ6kUnitBytes, in + 64 * half + l0, 16);
          std::memcpy(q + k * kQ6kUnitBytes + 16, in + 64 * half + 32 + l0, 16);
          std::memcpy(q + k * kQ6kUnitBytes + 32, in + 128 + 32 * half + l0, 16);
        }
      } else {
        std::memcpy(q, in + L.quant_offset, static_cast<size_t>(L.quant_bytes));
      }
      // The meta plane: the block's bytes outside [quant_offset, quant_offset + quant_bytes).
      std::memcpy(m, in, static_cast<size_t>(L.quant_offset));
      std::memcpy(m + L.quant_offset, in + L.quant_offset + L.quant_bytes,
                  static_cast<size_t>(bb - L.quant_offset - L.quant_bytes));
    }
  }
}

// ---- element decode (bit for bit ggml's) ----

// Element i of a row whose planes start at q (quants) and m (meta).
KVGATE_HD float plane_element(WeightType t, const uint8_t* q, const uint8_t* m, int64_t i) {
  const PlaneLayout L = plane_layout(t);
  const int elems = weight_block_elems(t);
  const size_t b = static_cast<size_t>(i / elems);
  const int j = static_cast<int>(i % elems);
  const uint8_t* qb = q + b * static_cast<size_t>(L.quant_bytes);
  const uint8_t* mb = m + b * static_cast<size_t>(L.meta_bytes);
  switch (t) {
    case WeightType::f32: return f32_from_bits(ggml::u32_at(qb));
    case WeightType::f16: return ggml::half_at(qb);
    case WeightType::bf16: return bf16_to_f32(static_cast<uint16_t>(ggml::u16_at(qb)));
    case WeightType::q4_0: return rn_mul(static_cast<float>(ggml::nibble(qb, j) - 8), ggml::half_at(mb));
    case WeightType::q4_1:
      return rn_add(rn_mul(static_cast<float>(ggml::nibble(qb, j)), ggml::half_at(mb)), ggml::half_at(mb + 2));
    case WeightType::q5_0: return rn_mul(static_cast<float>(ggml::q5_code(mb + 2, qb, j) - 16), ggml::half_at(mb));
    case WeightType::q5_1:
      return rn_add(rn_mul(static_cast<float>(ggml::q5_code(mb + 4, qb, j)), ggml::half_at(mb)), ggml::half_at(mb + 2));
    case WeightType::q8_0: return rn_mul(static_cast<float>(static_cast<int8_t>(qb[j])), ggml::half_at(mb));
    case WeightType::q4_k: {
      const int run = j / 64, within = j % 64;
      int sc, mn;
      ggml::q4k_scale_min(2 * run + (within >= 32 ? 1 : 0), mb + 4, sc, mn);
      const uint8_t byte = qb[32 * run + within % 32];
      return ggml::Q4_K::value(ggml::half_at(mb), ggml::half_at(mb + 2), sc, mn, within < 32 ? byte & 0x0f : byte >> 4);
    }
    case WeightType::q6_k: {
      const int half = j / 128, run = (j % 128) / 32, l = j % 32;
      const uint8_t* unit = qb + (2 * half + l / 16) * kQ6kUnitBytes;
      const int i16 = l % 16;
      const uint8_t low_byte = unit[(run % 2) * 16 + i16];
      const int low = run < 2 ? low_byte & 0x0f : low_byte >> 4;
      const int code = (low | (((unit[32 + i16] >> (2 * run)) & 3) << 4)) - 32;
      const float d = ggml::half_at(mb + 16);
      return rn_mul(rn_mul(d, static_cast<float>(static_cast<int8_t>(mb[8 * half + l / 16 + 2 * run]))),
                    static_cast<float>(code));
    }
  }
  return 0.0f;
}

// ---- the GEMV's units ----

// An exact float of a small non-negative integer code (< 2^23), minus `bias`.
KVGATE_HD float code_minus(uint32_t code, float bias_plus_2_23) {
  return f32_from_bits(0x4B000000u | code) - bias_plus_2_23;
}
inline constexpr float k2p23 = 8388608.0f;

// A 16-bit little-endian field of a meta plane (2-byte aligned where the layouts put one).
KVGATE_HD uint32_t meta_u16(const uint8_t* p) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return *reinterpret_cast<const uint16_t*>(p);
#else
  return ggml::u16_at(p);
#endif
}
KVGATE_HD float meta_half(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(meta_u16(p))); }

// Byte e (0..3) of a word.
KVGATE_HD uint32_t byte_of(uint32_t w, int e) { return (w >> (8 * e)) & 0xffu; }

template <WeightType T>
struct Units;

// Float types: a unit is 16 bytes of consecutive elements; no scales.
template <>
struct Units<WeightType::f32> {
  static constexpr int kUnitBytes = 16, kUnitElems = 4, kUnitsPerBlock = 1, kBlockElems = 4;
  struct Scales {};
  struct Sums {};
  KVGATE_HD static int x_index(int, int e) { return e; }
  KVGATE_HD static Scales scales(const uint8_t*, int) { return {}; }
  KVGATE_HD static Sums sums(const float*) { return {}; }
  KVGATE_HD static float dot(float acc, Scales, const uint32_t* w, const float* x, Sums) {
    KVGATE_UNROLL
    for (int e = 0; e < 4; ++e) acc = fmaf(f32_from_bits(w[e]), x[e], acc);
    return acc;
  }
};

template <WeightType T>
struct Units16 {
  static constexpr int kUnitBytes = 16, kUnitElems = 8, kUnitsPerBlock = 1, kBlockElems = 8;
  struct Scales {};
  struct Sums {};
  KVGATE_HD static int x_index(int, int e) { return e; }
  KVGATE_HD static Scales scales(const uint8_t*, int) { return {}; }
  KVGATE_HD static Sums sums(const float*) { return {}; }
  KVGATE_HD static float value(uint32_t half_bits) {
    if constexpr (T == WeightType::bf16) return bf16_to_f32(static_cast<uint16_t>(half_bits));
    else return f16_to_f32(static_cast<uint16_t>(half_bits));
  }
  KVGATE_HD static float dot(float acc, Scales, const uint32_t* w, const float* x, Sums) {
    KVGATE_UNROLL
    for (int e = 0; e < 4; ++e) {
      acc = fmaf(value(w[e] & 0xffffu), x[2 * e], acc);
      acc = fmaf(value(w[e] >> 16), x[2 * e + 1], acc);
    }
    return acc;
  }
};
template <>
struct Units<WeightType::f16> : Units16<WeightType::f16> {};
template <>
struct Units<WeightType::bf16> : Units16<WeightType::bf16> {};

// The 32-element blocks with nibbles: one unit is the block's 16 quant bytes; element e < 16 is
// the low nibble of byte e, element e + 16 its high nibble. `high` adds a fifth bit (q5).
// Signed types subtract `offset` from the code; the q*_1 types add m * sum(x) instead.
template <int kOffset, bool kHasMin, bool kFifthBit>
struct NibbleUnits {
  static constexpr int kUnitBytes = 16, kUnitElems = 32, kUnitsPerBlock = 1, kBlockElems = 32;
  static constexpr int kQhAt = kHasMin ? 4 : 2;  // q5: the high bits follow d (and m)
  struct Scales {
    float d, m;
    uint32_t qh;
  };
  struct Sums {
    float x;
  };
  KVGATE_HD static int x_index(int, int e) { return e; }
  KVGATE_HD static Scales scales(const uint8_t* meta, int) {
    Scales s{meta_half(meta), kHasMin ? meta_half(meta + 2) : 0.0f, 0u};
    if (kFifthBit) s.qh = meta_u16(meta + kQhAt) | (meta_u16(meta + kQhAt + 2) << 16);
    return s;
  }
  KVGATE_HD static Sums sums(const float* x) {
    float s = 0.0f;
    if (kHasMin) {
      KVGATE_UNROLL
      for (int e = 0; e < 32; ++e) s += x[e];
    }
    return {s};
  }
  KVGATE_HD static float dot(float acc, const Scales& s, const uint32_t* w, const float* x, Sums sx) {
    constexpr float bias = k2p23 + static_cast<float>(kOffset);
    float sum = 0.0f;
    KVGATE_UNROLL
    for (int k = 0; k < 4; ++k) {
      KVGATE_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int lo = 4 * k + e;
        uint32_t c_lo = byte_of(w[k], e) & 0x0fu, c_hi = byte_of(w[k], e) >> 4;
        if (kFifthBit) {
          c_lo |= ((s.qh >> lo) & 1u) << 4;
          c_hi |= ((s.qh >> (lo + 16)) & 1u) << 4;
        }
        sum = fmaf(code_minus(c_lo, bias), x[lo], sum);
        sum = fmaf(code_minus(c_hi, bias), x[lo + 16], sum);
      }
    }
    acc = fmaf(s.d, sum, acc);
    if (kHasMin) acc = fmaf(s.m, sx.x, acc);
    return acc;
  }
};
template <>
struct Units<WeightType::q4_0> : NibbleUnits<8, false, false> {};
template <>
struct Units<WeightType::q4_1> : NibbleUnits<0, true, false> {};
template <>
struct Units<WeightType::q5_0> : NibbleUnits<16, false, true> {};
template <>
struct Units<WeightType::q5_1> : NibbleUnits<0, true, true> {};

// Q8_0: two units of 16 signed bytes per block.
template <>
struct Units<WeightType::q8_0> {
  static constexpr int kUnitBytes = 16, kUnitElems = 16, kUnitsPerBlock = 2, kBlockElems = 32;
  struct Scales {
    float d;
  };
  struct Sums {};
  KVGATE_HD static int x_index(int k, int e) { return 16 * k + e; }
  KVGATE_HD static Scales scales(const uint8_t* meta, int) { return {meta_half(meta)}; }
  KVGATE_HD static Sums sums(const float*) { return {}; }
  KVGATE_HD static float dot(float acc, Scales s, const uint32_t* w, const float* x, Sums) {
    float sum = 0.0f;
    KVGATE_UNROLL
    for (int k = 0; k < 4; ++k) {
      // (b ^ 0x80) is the signed byte plus 128, a code in 0..255.
      const uint32_t u = w[k] ^ 0x80808080u;
      KVGATE_UNROLL
      for (int e = 0; e < 4; ++e) sum = fmaf(code_minus(byte_of(u, e), k2p23 + 128.0f), x[4 * k + e], sum);
    }
    return fmaf(s.d, sum, acc);
  }
};

// Q4_K: eight units of 16 quant bytes per super-block; unit k = 2 run + h holds bytes
// 32 run + 16 h + i, whose low nibbles are elements 64 run + 16 h + i (sub-block 2 run) and high
// nibbles elements 64 run + 32 + 16 h + i (sub-block 2 run + 1).
template <>
struct Units<WeightType::q4_k> {
  static constexpr int kUnitBytes = 16, kUnitElems = 32, kUnitsPerBlock = 8, kBlockElems = 256;
  struct Scales {
    float d_lo, m_lo, d_hi, m_hi;  // d * sc and dmin * m of the two sub-blocks
  };
  struct Sums {
    float lo, hi;
  };
  KVGATE_HD static int x_index(int k, int e) {
    const int run = k / 2, h = k % 2;
    return 64 * run + 16 * h + (e < 16 ? e : 32 + e - 16);
  }
  KVGATE_HD static Scales scales(const uint8_t* meta, int k) {
    const float d = meta_half(meta), dmin = meta_half(meta + 2);
    const int run = k / 2;
    int sc0, m0, sc1, m1;
    ggml::q4k_scale_min(2 * run, meta + 4, sc0, m0);
    ggml::q4k_scale_min(2 * run + 1, meta + 4, sc1, m1);
    return {rn_mul(d, static_cast<float>(sc0)), rn_mul(dmin, static_cast<float>(m0)), rn_mul(d, static_cast<float>(sc1)),
            rn_mul(dmin, static_cast<float>(m1))};
  }
  KVGATE_HD static Sums sums(const float* x) {
    float lo = 0.0f, hi = 0.0f;
    KVGATE_UNROLL
    for (int e = 0; e < 16; ++e) {
      lo += x[e];
      hi += x[16 + e];
    }
    return {lo, hi};
  }
  KVGATE_HD static float dot(float acc, const Scales& s, const uint32_t* w, const float* x, Sums sx) {
    float lo = 0.0f, hi = 0.0f;
    KVGATE_UNROLL
    for (int k = 0; k < 4; ++k) {
      KVGATE_UNROLL
      for (int e = 0; e < 4; ++e) {
        const uint32_t b = byte_of(w[k], e);
        lo = fmaf(code_minus(b & 0x0fu, k2p23), x[4 * k + e], lo);
        hi = fmaf(code_minus(b >> 4, k2p23), x[16 + 4 * k + e], hi);
      }
    }
    acc = fmaf(s.d_lo, lo, acc);
    acc = fmaf(-s.m_lo, sx.lo, acc);
    acc = fmaf(s.d_hi, hi, acc);
    return fmaf(-s.m_hi, sx.hi, acc);
  }
};

// Q6_K: four units of 48 bytes per super-block (kQ6kUnitBytes); unit k = 2 half + l0 / 16
// decodes elements 128 half + 32 run + l0 + i (e = 16 run + i), whose scale is
// scales[8 half + l0 / 16 + 2 run].
template <>
struct Units<WeightType::q6_k> {
  static constexpr int kUnitBytes = kQ6kUnitBytes, kUnitElems = 64, kUnitsPerBlock = 4, kBlockElems = 256;
  struct Scales {
    float d[4];  // d * scale of each run
  };
  struct Sums {};
  KVGATE_HD static int x_index(int k, int e) { return 128 * (k / 2) + 32 * (e / 16) + 16 * (k % 2) + e % 16; }
  KVGATE_HD static Scales scales(const uint8_t* meta, int k) {
    const float d = meta_half(meta + 16);
    const int base = 8 * (k / 2) + k % 2;
    Scales s;
    KVGATE_UNROLL
    for (int run = 0; run < 4; ++run) s.d[run] = rn_mul(d, static_cast<float>(static_cast<int8_t>(meta[base + 2 * run])));
    return s;
  }
  KVGATE_HD static Sums sums(const float*) { return {}; }
  // w: 12 words: ql of runs 0/2 (w[0..3]), ql of runs 1/3 (w[4..7]), qh (w[8..11]).
  KVGATE_HD static float dot(float acc, const Scales& s, const uint32_t* w, const float* x, Sums) {
    float run_sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    KVGATE_UNROLL
    for (int k = 0; k < 4; ++k) {
      KVGATE_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int i = 4 * k + e;
        const uint32_t a = byte_of(w[k], e), b = byte_of(w[4 + k], e), h = byte_of(w[8 + k], e);
        const uint32_t codes[4] = {(a & 0x0fu) | ((h & 3u) << 4), (b & 0x0fu) | (((h >> 2) & 3u) << 4),
                                   (a >> 4) | (((h >> 4) & 3u) << 4), (b >> 4) | (((h >> 6) & 3u) << 4)};
        KVGATE_UNROLL
        for (int run = 0; run < 4; ++run)
          run_sum[run] = fmaf(code_minus(codes[run], k2p23 + 32.0f), x[16 * run + i], run_sum[run]);
      }
    }
    KVGATE_UNROLL
    for (int run = 0; run < 4; ++run) acc = fmaf(s.d[run], run_sum[run], acc);
    return acc;
  }
};

}  // namespace kvgate::kernels::gpu
