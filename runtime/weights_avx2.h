#pragma once
// AVX2/FMA kernels behind weights.cc's dispatch; call only when the CPU has AVX2, FMA and F16C.
#include <cstdint>

namespace kvgate::runtime::avx2 {

// row: n_blocks blocks of the type; x: n_blocks * 32 floats; block_sums[b] = Σ x over block b.
float dot_q4_0(const uint8_t* row, int64_t n_blocks, const float* x, const float* block_sums);
float dot_q4_1(const uint8_t* row, int64_t n_blocks, const float* x, const float* block_sums);
float dot_q8_0(const uint8_t* row, int64_t n_blocks, const float* x, const float* block_sums);
float dot_f32(const float* row, int64_t n, const float* x);
float dot_f16(const uint8_t* row, int64_t n, const float* x);
// bf16 is the top half of an f32: widened by a 16-bit shift, exactly as bf16_to_f32.
float dot_bf16(const uint8_t* row, int64_t n, const float* x);

// n_blocks blocks of the type expanded to n_blocks * 32 floats, bit for bit the scalar block
// decode.
void dequantize_q4_0(const uint8_t* row, int64_t n_blocks, float* out);
void dequantize_q4_1(const uint8_t* row, int64_t n_blocks, float* out);
void dequantize_q8_0(const uint8_t* row, int64_t n_blocks, float* out);

}  // namespace kvgate::runtime::avx2
