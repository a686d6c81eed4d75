#pragma once
// AVX2/FMA/F16C fast paths for the formats attention reads most (f16, bf16, FP8, int8/int4 and
// fp8 per-token-head, q8_0, q4_0, q4_1). Every entry point checks the running CPU first and
// returns false when it cannot take the fast path (no AVX2, or a head_dim the kernel does not
// tile); the caller then runs its scalar reference. Row layouts are the codecs' stored layouts,
// described next to each RowKind.
#include <cstddef>
#include <cstdint>

namespace kvgate::kernels::simd {

enum class RowKind : uint8_t {
  f32,           // head_dim x float (rows a codec has already dequantized into scratch)
  f16,           // head_dim x binary16
  bf16,          // head_dim x bfloat16
  fp8_e4m3fn,    // head_dim x fp8; value = code * RowFormat::scale (per-tensor)
  fp8_e5m2,
  fp8_e4m3fnuz,
  fp8_pth,       // f32 scale, head_dim x e4m3fn; value = code * scale
  int8_pth,      // f32 scale, head_dim x int8; value = q * scale
  int4_pth,      // f32 scale, head_dim/2 bytes, element 2i in the low nibble, stored q + 8
  q8_0,          // ggml block_q8_0 {f16 d; int8 qs[32]}
  q4_0,          // ggml block_q4_0 {f16 d; uint8 qs[16]}
  q4_1,          // ggml block_q4_1 {f16 d; f16 m; uint8 qs[16]}
  q5_0,          // ggml block_q5_0 {f16 d; uint8 qh[4]; uint8 qs[16]}
  q5_1,          // ggml block_q5_1 {f16 d; f16 m; uint8 qh[4]; uint8 qs[16]}
  iq4_nl,        // ggml block_iq4_nl {f16 d; uint8 qs[16]}, values from the iq4_nl grid
  nvfp4,         // blocks of [e4m3 scale][8 bytes E2M1, element 2i low]; RowFormat::scale = global scale
  u2, u3, u4, u8,  // f16 scale, f16 zero, b-bit codes LSB first; value = code * scale + zero
};

struct RowFormat {
  RowKind kind;
  int head_dim;
  size_t row_bytes;    // bytes of one token's row (the codec's group_bytes())
  float scale = 1.0f;  // per-tensor scale of the fp8_* kinds
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

}  // namespace kvgate::kernels::simd
