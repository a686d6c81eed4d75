#pragma once
// Fused attention over the paged KV cache: scores and value sums are computed straight from
// the quantized pages with Codec::dot_rows / axpy_rows, one call per page run, so the cache is
// never dequantized as a whole. Softmax is online (SoftmaxState, FlashInfer's state: running max,
// denominator, accumulator), which is what lets the kernel stream pages once.
//
// Semantics (docs/design.md, "KV formats and their semantics"): the queries' own K/V are
// already appended and quantized, and every query attends to the quantized cache, causal: query
// i of a chunk of n sits at position length - n + i and sees positions [0, length - n + i].
// Decode is a chunk of one. In a cache with a sliding window W (PagedKvCacheShape::window) it
// sees (length - n + i - W, length - n + i], as llama.cpp's LLAMA_SWA_TYPE_STANDARD mask.
#include <cmath>
#include <cstdint>

#include "kernels/paged_kv_cache.h"
#include "kernels/softmax_state.h"

namespace kvgate {
class ThreadPool;
}

namespace kvgate::kernels {

struct AttentionShape {
  int n_heads = 0;       // query heads; a multiple of the cache's n_kv_heads (GQA)
  float scale = 0.0f;    // 0 = 1/sqrt(head_dim)
};

// q: [n_queries][n_heads][head_dim] -> out: [n_queries][n_heads][head_dim]. Deterministic: each
// output row is computed by one thread in one fixed order, so the result does not depend on
// the pool's size. pool may be null (runs on the caller's thread).
void paged_attention(const PagedKvCache& cache, SeqId seq, int layer, const AttentionShape& shape, const float* q,
                     int64_t n_queries, float* out, ThreadPool* pool = nullptr);

inline void decode_attention(const PagedKvCache& cache, SeqId seq, int layer, const AttentionShape& shape,
                             const float* q, float* out, ThreadPool* pool = nullptr) {
  paged_attention(cache, seq, layer, shape, q, 1, out, pool);
}

}  // namespace kvgate::kernels
