#pragma once
// The roundings of an engine's attention arithmetic (kernels/arithmetic.h), written once for the
// CPU's arithmetic attention (kernels/attention_arithmetic.cc) and the GPU's
// (kernels/gpu/gpu_attention_arithmetic.cu): the query rounding, the rounding of P before it meets
// V, and the step of ggml-cpu's one-row kernel with its optional f16 accumulator. One source
// means the two backends round with the same operations in the same order; what still differs
// between them is only what these functions leave to the caller (the order of a dot product's
// sum, and the device's expf against glibc's). tests/kernels/arithmetic_rounding_test.cc checks
// these against the CPU's attention arithmetic as it was written before it called them. Plain
// C++17 for the device compilers, every rounding step spelled out (rn_*, core/host_device.h).
#include <cmath>
#include <cstdint>

#include "core/float_convert.h"
#include "core/host_device.h"
#include "kernels/arithmetic.h"
#include "kernels/ggml_blocks.h"
#include "kernels/softmax_state.h"

namespace kvgate::kernels {

KVGATE_HD float f16_rounded(float x) { return f16_to_f32(f32_to_f16(x)); }

// y[0..n) = x[0..n) as `rounding` leaves it, for one block of a query row: the elements from a
// multiple of 32 on, n <= 32. The ggml roundings work on whole blocks (n == 32: llama.cpp's
// quantized key types need that head_dim); the others element by element, so a GPU lane can
// round its block of the row while the CPU walks the row. y may equal x.
KVGATE_HD void round_query_block(QueryRounding rounding, float query_scale, const float* x, float* y, int n) {
  uint8_t block[ggml::Q8_1::kBytes];
  switch (rounding) {
    case QueryRounding::unsupported:
    case QueryRounding::none:
      if (y != x)
        for (int i = 0; i < n; ++i) y[i] = x[i];
      return;
    case QueryRounding::f16:
      for (int i = 0; i < n; ++i) y[i] = f16_rounded(x[i]);
      return;
    case QueryRounding::bf16:
      for (int i = 0; i < n; ++i) y[i] = bf16_to_f32(f32_to_bf16(x[i]));
      return;
    case QueryRounding::q8_0:
      ggml::Q8_0::quantize_x86(x, block);
      ggml::Q8_0::dequantize(block, y);
      return;
    case QueryRounding::q8_1:
      ggml::Q8_1::quantize_x86(x, block);
      ggml::Q8_1::dequantize(block, y);
      return;
    case QueryRounding::q8_1_cuda:
      ggml::q8_1_cuda_fattn_values(x, y);
      return;
    case QueryRounding::fp8_e4m3:
      // vLLM's static per-tensor QuantFP8: e4m3(q / q_scale), what FA3 multiplies by q_scale again.
      for (int i = 0; i < n; ++i)
        y[i] = rn_mul(fp8_to_f32(f32_to_fp8(rn_div(x[i], query_scale), Fp8Kind::e4m3fn), Fp8Kind::e4m3fn), query_scale);
      return;
  }
}

// A whole query row of n elements, block by block (n a multiple of 32 for the ggml roundings).
KVGATE_HD void round_query_row(QueryRounding rounding, float query_scale, const float* x, float* y, int n) {
  for (int i = 0; i < n; i += ggml::kBlock)
    round_query_block(rounding, query_scale, x + i, y + i, n - i < ggml::kBlock ? n - i : ggml::kBlock);
}

// One softmax weight as the engine hands it to P·V; the denominator keeps the unrounded weight.
KVGATE_HD float round_weight(WeightRounding rounding, float w) {
  switch (rounding) {
    case WeightRounding::none: return w;
    case WeightRounding::f16: return f16_rounded(w);
    case WeightRounding::fp8_e4m3_256:
      // P * 256 in E4M3 (exact scalings by powers of two), FA3's exp2 offset of 8.
      return rn_mul(fp8_to_f32(f32_to_fp8(rn_mul(w, 256.0f), Fp8Kind::e4m3fn), Fp8Kind::e4m3fn), 1.0f / 256.0f);
  }
  return w;
}

// The tile kernels (CUDA's MMA kernel, FA3) per page of keys: the page's largest score first
// (tile_max, std::max's comparison, so a NaN score never becomes the maximum), the
// SoftmaxState raised to it, then each weight's rounded value times the value added in one
// fused multiply-add, while the denominator sums the unrounded weights.
KVGATE_HD float tile_max(float page_max, float score) { return page_max < score ? score : page_max; }
KVGATE_HD float tile_accumulate(float acc, float rounded_weight, float value) {
  return fmaf(rounded_weight, value, acc);
}

// ggml-cpu's one-row kernel for one query row and one key (ops.cpp:8966-9031), split into the
// part every element shares (one_row_step: the new max and sum, and the two factors) and the
// per-element update (one_row_accumulate*), so the CPU can walk a row and GPU lanes their
// spans of it. A new maximum rescales the accumulator by exp(old - new) and adds the value with
// weight 1; otherwise the value enters with exp(s - max).
struct OneRowStep {
  bool rescale;        // the maximum moved: the accumulator is multiplied by acc_scale first
  float acc_scale;     // exp(old max - new max), 1 when the maximum held
  float value_weight;  // the weight the value enters with
};

KVGATE_HD OneRowStep one_row_step(float score, float& max, float& sum) {
  OneRowStep step{false, 1.0f, 1.0f};
  if (score > max) {
    step.rescale = true;
    step.acc_scale = softmax_exp(rn_sub(max, score));
    max = score;
  } else {
    step.value_weight = softmax_exp(rn_sub(score, max));
  }
  sum = rn_add(rn_mul(sum, step.acc_scale), step.value_weight);
  return step;
}

// An f32 accumulator element: scaled, then one fused multiply-add of the value.
KVGATE_HD float one_row_accumulate(const OneRowStep& step, float acc, float value) {
  if (step.rescale) acc = rn_mul(acc, step.acc_scale);
  return fmaf(value, step.value_weight, acc);
}

// An f16 accumulator element (an f16 V): rounded to f16 after the scale and after the fused add,
// as ggml_vec_scale_f16 and ggml_vec_mad_f16 go f16 -> f32 -> f16.
KVGATE_HD uint16_t one_row_accumulate_f16(const OneRowStep& step, uint16_t acc, float value) {
  if (step.rescale) acc = f32_to_f16(rn_mul(f16_to_f32(acc), step.acc_scale));
  return f32_to_f16(fmaf(value, step.value_weight, f16_to_f32(acc)));
}

// What the accumulator is multiplied by at the end: ggml divides by the sum as a multiply by
// 1 / S, 0 for a row that saw no key.
KVGATE_HD float softmax_normalizer(float denom) { return denom == 0.0f ? 0.0f : rn_div(1.0f, denom); }

}  // namespace kvgate::kernels
