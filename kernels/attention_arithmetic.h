#pragma once
// Attention with an engine's arithmetic (kernels/arithmetic.h): the query rounded as the engine
// rounds it, and the softmax and value accumulation as its kernel does them (llama.cpp's CPU
// one-row kernel key by key with an f16 accumulator for f16 values; CUDA's f16 conversions;
// FA3's FP8 P). paged_attention (kernels/attention.h) hands a call here only when its
// resolved arithmetic is not exact, so the default f32 path stays the fused fast one; this path
// is written for fidelity, not speed: it decodes each page once and loops per row and key.
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/arithmetic.h"

namespace kvgate::kernels {

// Same contract as paged_attention, for a view whose engine resolved to `arithmetic`. The key
// and value formats must be per-token ones without a window (what arithmetic_refusal admits).
void arithmetic_paged_attention(const KvLayerView& view, const AttentionShape& shape, const AttentionArithmetic& arithmetic,
                                const float* q, int64_t n_queries, float* out, ThreadPool* pool);

// y[0..n) = x as `arithmetic.query` rounds it (y may equal x). The ggml roundings work on
// blocks of 32, so n is then a multiple of 32 (llama.cpp's quantized types need that head_dim).
void round_query(const AttentionArithmetic& arithmetic, const float* x, float* y, int n);

}  // namespace kvgate::kernels
