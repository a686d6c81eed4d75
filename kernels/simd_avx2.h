#pragma once
// AVX2/FMA/F16C fast paths for the formats attention reads most (f16, bf16, FP8, int8/int4 and
// fp8 per-token-head, the ggml blocks, nvfp4, u{b}). Every entry point checks the running CPU
// first and returns false when it cannot take the fast path (no AVX2, a format without AVX2
// kernels, or a head_dim the kernel does not tile); the caller then runs its scalar reference.
// Rows are the codecs' stored layouts; the kernels live per format family in
// kernels/simd_avx2_<family>.cc and are found by the registry entry's FormatId.
#include <cstddef>
#include <cstdint>

#include "kernels/format_id.h"

namespace kvgate::kernels::simd {

struct RowFormat {
  FormatId id;         // the registry entry's (FormatInfo::id); FormatId::f32 for rows a codec has already decoded
  int head_dim;
  size_t row_bytes;    // bytes of one token's row (the codec's group_bytes())
  float scale = 1.0f;  // per-tensor scale of fp8_*, global scale of nvfp4
};

// scores[qi * n_tokens + t] = q[qi] . row t (value units, scale applied).
bool dot_rows(const RowFormat& f, const float* q, int n_q, const uint8_t* rows, int n_tokens, float* scores);
// acc[qi] += sum_t weights[qi * n_tokens + t] * row t.
bool axpy_rows(const RowFormat& f, const float* weights, int n_q, const uint8_t* rows, int n_tokens, float* acc);
// Bit-identical to the codec's decode reference. Returns false for the E4M3 kinds (their fast
// decoder folds a power of two into the scale); the FP8 codecs use a lookup table instead.
bool dequantize_row(const RowFormat& f, const uint8_t* row, float* y);
// Bit-identical to the codec's encode reference for finite inputs.
bool quantize_row(const RowFormat& f, const float* x, uint8_t* row);

// Plain float kernels for formats without a fused decoder (decode a row, then these); they
// dispatch to AVX2 themselves and always succeed.
float dot_f32(const float* a, const float* b, int n);
void axpy_f32(float w, const float* x, float* y, int n);

// One page row of the CPU attention's online softmax: weights[t] = softmax_exp(scores[t] - max)
// for t < n (weights may be scores), 8 at a time with AVX2 and bit for bit what the scalar
// exp_poly gives, so results do not depend on the CPU.
void softmax_weights(const float* scores, int n, float max, float* weights);

}  // namespace kvgate::kernels::simd
