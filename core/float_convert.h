#pragma once
// Bit-level conversions between f32 and the narrow float types the KV formats store.
// They are written once, without intrinsics, and used by the CPU reference and by the CUDA/HIP
// kernels alike (HIP 5.2 has no FP8 header), so every backend encodes the same bits.
//
// Rounding is round-to-nearest-even everywhere. FP8 encoding saturates: a finite value or an
// infinity beyond the format's largest finite magnitude becomes that magnitude with its sign
// (vLLM clamps to +-max before converting, and __nv_cvt_float_to_fp8 is used with SATFINITE).
// A NaN input encodes to the format's NaN code; no engine stores NaN on purpose, so we keep it
// visible rather than clamp it.
//
// Every NaN encodes to one code per format (f16 0x7E00, bf16 0x7FC0, E4M3FN/E5M2 0x7F, FNUZ
// 0x80), whatever its sign and payload. Those are the hardware's choice, not the data's: a NaN
// that arithmetic makes (inf/inf, 0 x inf, anything with a NaN operand) is x86's "indefinite"
// 0xFFC00000 or the NaN operand's own bits on the CPU, but always 0x7FFFFFFF on NVIDIA GPUs. A
// codec that stored the sign or payload wrote different bytes for the same row on the CPU and
// the GPU (the first H200 run: fp8_pth over an infinite row, iq4_nl's scale over a row with a
// NaN, tqprod's residual norm over a row whose 1/norm overflows), however exactly every
// operation was rounded.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace kvgate {

KVGATE_HD uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
KVGATE_HD float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// ---- IEEE binary16 ----
KVGATE_HD uint16_t f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return 0x7e00u;  // the one NaN code (see the top of the file)
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {
    // Below the smallest normal half: adding 0.5f aligns the half subnormal quantum (2^-24)
    // with the float's last mantissa bit, so the FPU's own nearest-even rounding does the work.
    float t = f32_from_bits(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (f32_bits(t) - 0x3f000000u));
  }
  uint32_t mant_odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + mant_odd;  // rebias 127 -> 15 and round half to even
  return static_cast<uint16_t>(sign | (ax >> 13));
}

KVGATE_HD float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24, exact
    return f32_from_bits(f32_bits(v) | sign);
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

// ---- bfloat16 ----
KVGATE_HD uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // the one NaN code
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
KVGATE_HD float bf16_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

// ---- FP8 ----
enum class Fp8Kind : uint8_t { e4m3fn, e5m2, e4m3fnuz };

struct Fp8Spec {
  int exp_bits;
  int man_bits;
  int bias;
  float max_finite;
  uint8_t max_code;  // code of +max_finite
};

KVGATE_HD Fp8Spec fp8_spec(Fp8Kind kind) {
  switch (kind) {
    case Fp8Kind::e4m3fn: return Fp8Spec{4, 3, 7, 448.0f, 0x7e};
    case Fp8Kind::e5m2: return Fp8Spec{5, 2, 15, 57344.0f, 0x7b};
    default: return Fp8Spec{4, 3, 8, 240.0f, 0x7f};  // e4m3fnuz
  }
}

KVGATE_HD float fp8_to_f32(uint8_t code, Fp8Kind kind) {
  const Fp8Spec s = fp8_spec(kind);
  const uint32_t sign = code >> 7;
  const uint32_t expf = (code >> s.man_bits) & ((1u << s.exp_bits) - 1u);
  const uint32_t mant = code & ((1u << s.man_bits) - 1u);
  if (kind == Fp8Kind::e4m3fnuz && code == 0x80) return NAN;
  if (kind == Fp8Kind::e4m3fn && (code & 0x7f) == 0x7f) return NAN;
  if (kind == Fp8Kind::e5m2 && expf == 31) return mant ? NAN : (sign ? -INFINITY : INFINITY);
  // Built from bits rather than with ldexpf (a libm call per element in decode loops). Every
  // FP8 value is a normal f32; a subnormal code is mant * 2^(1 - bias - man_bits), an exact
  // product with a power of two.
  if (expf == 0) {
    const float quantum = f32_from_bits(static_cast<uint32_t>(127 + 1 - s.bias - s.man_bits) << 23);
    const float v = static_cast<float>(mant) * quantum;
    return sign ? -v : v;
  }
  const uint32_t biased = static_cast<uint32_t>(static_cast<int>(expf) - s.bias + 127);
  return f32_from_bits((sign << 31) | (biased << 23) | (mant << (23 - s.man_bits)));
}

KVGATE_HD uint8_t f32_to_fp8(float f, Fp8Kind kind) {
  const Fp8Spec s = fp8_spec(kind);
  const uint32_t sign = f32_bits(f) >> 31;
  if (f != f) return kind == Fp8Kind::e4m3fnuz ? 0x80 : 0x7f;  // the one NaN code, unsigned
  const float a = fabsf(f);
  if (a >= s.max_finite) return static_cast<uint8_t>((sign << 7) | s.max_code);
  const uint8_t zero = kind == Fp8Kind::e4m3fnuz ? 0 : static_cast<uint8_t>(sign << 7);
  if (a == 0.0f) return zero;
  int e;
  frexpf(a, &e);
  int ex = e - 1;  // floor(log2(a))
  const int min_exp = 1 - s.bias;
  if (ex < min_exp) ex = min_exp;
  // The grid spacing in a's binade; dividing by a power of two is exact, so rintf rounds the
  // true value to the nearest grid point, ties to even. Values below max never round past it.
  const float steps = rintf(ldexpf(a, s.man_bits - ex));
  if (steps == 0.0f) return zero;
  uint32_t isteps = static_cast<uint32_t>(steps);
  uint32_t expf_field;
  uint32_t mant;
  if (ex == min_exp && isteps < (1u << s.man_bits)) {
    expf_field = 0;  // subnormal
    mant = isteps;
  } else {
    if (isteps == (2u << s.man_bits)) {  // rounded up into the next binade
      isteps >>= 1;
      ++ex;
    }
    expf_field = static_cast<uint32_t>(ex + s.bias);
    mant = isteps - (1u << s.man_bits);
  }
  return static_cast<uint8_t>((sign << 7) | (expf_field << s.man_bits) | mant);
}

}  // namespace kvgate
