#pragma once
// The exact tensor-core path's arithmetic (gpu_ops.h MatmulPath::exact), host and device code:
// tests/kernels/split_columns_test.cc checks it on the CPU against the f32 product.
//
// A 16-bit GEMM multiplies 16-bit operands exactly into an f32 accumulator, so the only loss is in
// rounding x. x is split into 16-bit pieces whose sum carries a float's bits, each piece a column
// of the same GEMM (N = pieces x tokens: one pass over the weights), and the columns are combined
// after:
//   - f16 weights: x of token t is first scaled by a power of two s_t that puts its largest
//     magnitude in [2^14, 2^15) (exact; no value overflows f16, few fall into its subnormals),
//     then hi = f16(x s_t), lo = f16((x s_t - hi) 2^11): 22 significant bits. y = (Y_hi +
//     2^-11 Y_lo) / s_t, the 2^-11 and 1/s_t exact.
//   - bf16 weights: three bf16 pieces (8 bits each, f32's exponent range: no scaling), y = (Y_0 +
//     Y_1) + Y_2.
// What f16 cannot hold (a non-finite x) is not rounded: the caller raises its flag and redoes the
// matmul in f32.
#include <cmath>
#include <cstdint>

#include "core/float_convert.h"
#include "core/host_device.h"

namespace kvgate::kernels::gpu {

inline constexpr float kLoScale = 2048.0f;  // 2^11: lo's weight below hi, taken back in the combine

// The power of two s (as an exponent) that puts amax * s in [2^14, 2^15); 0 for amax 0. amax
// must be finite. Clamped so s and 1/s stay normal floats.
KVGATE_HD int token_scale_exponent(float amax) {
  if (!(amax > 0.0f)) return 0;
  const int e = static_cast<int>((f32_bits(amax) >> 23) & 0xffu);  // biased exponent; 0: subnormal
  const int log2_floor = e == 0 ? -127 : e - 127;
  int s = 14 - log2_floor;
  if (s > 120) s = 120;
  if (s < -120) s = -120;
  return s;
}
// 2^e for |e| <= 126, exactly.
KVGATE_HD float pow2(int e) { return f32_from_bits(static_cast<uint32_t>(e + 127) << 23); }

struct F16Pair {
  uint16_t hi, lo;
};
// x already multiplied by its token's scale (|xs| < 2^15).
KVGATE_HD F16Pair split_f16_pair(float xs) {
  const uint16_t hi = f32_to_f16(xs);
  const uint16_t lo = f32_to_f16(rn_mul(rn_sub(xs, f16_to_f32(hi)), kLoScale));
  return {hi, lo};
}
KVGATE_HD float combine_f16_pair(float y_hi, float y_lo, float inv_scale) {
  return rn_mul(rn_add(y_hi, rn_mul(y_lo, 1.0f / kLoScale)), inv_scale);
}

struct Bf16Triple {
  uint16_t p0, p1, p2;
};
KVGATE_HD Bf16Triple split_bf16_triple(float x) {
  const uint16_t p0 = f32_to_bf16(x);
  const float r1 = rn_sub(x, bf16_to_f32(p0));
  const uint16_t p1 = f32_to_bf16(r1);
  const uint16_t p2 = f32_to_bf16(rn_sub(r1, bf16_to_f32(p1)));
  return {p0, p1, p2};
}
KVGATE_HD float combine_bf16_triple(float y0, float y1, float y2) { return rn_add(rn_add(y0, y1), y2); }

// A dequantized weight as the f16 pair the quantized exact path multiplies: hi = f16(w),
// lo = f16((w - hi) 2^11) (no token scale: weights are what they are; one beyond f16's range
// raises the flag). Two f16 of 11 bits hold every q4/q5/q8 weight exactly (at most 18 bits).
KVGATE_HD F16Pair split_weight_f16(float w) { return split_f16_pair(w); }

}  // namespace kvgate::kernels::gpu
