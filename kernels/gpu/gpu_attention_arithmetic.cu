// One kernel source for CUDA (nvcc) and HIP (clang -xhip); see vendor.h.
//
// Attention under an engine's arithmetic (kernels/arithmetic.h) over the paged device cache: the
// GPU twin of kernels/attention_arithmetic.cc, rounding with the functions of
// kernels/arithmetic_rounding.h that the CPU path calls too. attention_device hands a call here
// only when the resolved arithmetic is not exact, so gpu_attention.cu's flash-decoding kernel
// stays the fast path for everything else.
//
// Written for fidelity, not speed: one 32-thread block per output row (query position x query
// head), the keys of the row's KV head walked page by page in token order with the cache's own
// page size, no sequence splits. Each row's softmax and accumulator thus see the keys in the
// CPU's order and with its page boundaries, so the two agree to float rounding; what differs is
// the summation order of each key's dot product and the device's expf. Per page, each lane
// scores every 32nd token (the whole key row, decoded and dotted in order) into shared memory;
// then every lane walks the page's tokens in order over its own span of head_dim: the tile
// kernels (CUDA MMA, FA3) take the page maximum first and round P, the one-row kernel
// (llama.cpp's CPU) updates max and sum key by key, in f16 for an f16 V.
//
// What it costs: nothing is shared between the rows of a GQA group or of a prefill chunk, so
// each row re-reads and re-decodes its KV head's keys and values (a group of g query heads
// reads them g times, a chunk of n positions n times), the value pass is serial over tokens,
// and a block holds a single warp. Against the fused path that is several times slower for a
// decode step and far slower for long prefill chunks: fine for evaluation runs of a few
// thousand tokens per sequence, not for serving-speed benchmarks (gpu_kv_bench times the exact
// path).
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/arithmetic_rounding.h"
#include "kernels/gpu/gpu_kv_impl.h"

namespace kvgate::kernels::gpu {
namespace {

// Elements of a key row each lane decodes at a time when it scores a token (decode_span's N).
constexpr int kKeySpan = 8;
// The dynamic shared memory a block may use without opting in (both vendors).
constexpr size_t kSharedLimit = 48 * 1024;

struct ArithmeticParams {
  PagedRows keys, values;
  SideArgs kf, vf;
  AttentionArithmetic a;
  int head_dim;
  int n_tokens;   // tokens in the cache
  int n_heads;    // query heads
  int group;      // query heads per KV head
  int n_queries;  // query positions, the last n_queries of the sequence
  int page_tokens;
  const float* q;  // [n_queries][n_heads][head_dim]
  float softmax_scale;
  float* out;      // [n_queries][n_heads][head_dim]
};

// q . k for token t of the row's KV head: the whole key row decoded in order (f16-rounded when
// the engine converts keys to f16), products summed in element order.
__device__ float key_score(const ArithmeticParams& p, const float* q_s, int t, int kv_head) {
  const int D = p.head_dim;
  const uint8_t* row = p.keys.unit(t, kv_head);
  float s = 0.0f;
  for (int i0 = 0; i0 < D; i0 += kKeySpan) {
    float k[kKeySpan];
    decode_span<kKeySpan>(p.kf.format, row, i0, min(static_cast<int>(kKeySpan), D - i0), p.kf.scale, k, nullptr, 0, D);
#pragma unroll
    for (int e = 0; e < kKeySpan; ++e) {
      if (i0 + e >= D) break;
      s = fmaf(q_s[i0 + e], p.a.key_to_f16 ? f16_rounded(k[e]) : k[e], s);
    }
  }
  return s;
}

// EPL: head_dim elements per lane (head_dim <= 32 * EPL), the lane's span of the value pass.
template <int EPL>
__global__ void __launch_bounds__(kWarp) arithmetic_attention_kernel(ArithmeticParams p) {
  extern __shared__ float shared[];
  const int D = p.head_dim;
  float* row_s = shared;       // [head_dim]: the rounded query, later the output row
  float* scores = shared + D;  // [page_tokens]: one page's scaled scores
  const int lane = threadIdx.x;
  const int row = blockIdx.x;  // = query position * n_heads + head, the row of q and out
  const int head = row % p.n_heads;
  const int kv_head = head / p.group;
  const int pos = p.n_tokens - p.n_queries + row / p.n_heads;
  const AttentionArithmetic& a = p.a;

  // The engines rotate the unscaled query into the key's basis (prepare_query; llama.cpp does
  // it in the graph), scale it when their kernel does, then round it: a lane per block of 32.
  for (int i = lane; i < D; i += kWarp) row_s[i] = p.q[static_cast<size_t>(row) * D + i];
  __syncthreads();
  if (p.kf.rot) {
    if (lane == 0) rotate_forward(*p.kf.rot, D, row_s, row_s);
    __syncthreads();
  }
  if (a.query_prescaled) {
    for (int i = lane; i < D; i += kWarp) row_s[i] = rn_mul(row_s[i], p.softmax_scale);
    __syncthreads();
  }
  for (int b = lane * ggml::kBlock; b < D; b += kWarp * ggml::kBlock) {
    round_query_block(a.query, a.query_scale, row_s + b, row_s + b, min(static_cast<int>(ggml::kBlock), D - b));
  }
  __syncthreads();
  const float score_scale = a.query_prescaled ? 1.0f : p.softmax_scale;

  const int own = lane * EPL;  // this lane's span of head_dim
  const int own_n = max(0, min(EPL, D - own));
  float acc[EPL];
  uint16_t acc16[EPL];
#pragma unroll
  for (int e = 0; e < EPL; ++e) {
    acc[e] = 0.0f;
    acc16[e] = 0;
  }
  float max_score = -INFINITY, sum = 0.0f;  // the one-row kernel's state
  SoftmaxState state;                       // the tile kernels'

  for (int ps = 0; ps <= pos; ps += p.page_tokens) {
    const int n = min(p.page_tokens, pos + 1 - ps);  // this page's keys the row sees
    for (int t = lane; t < n; t += kWarp) scores[t] = rn_mul(key_score(p, row_s, ps + t, kv_head), score_scale);
    __syncthreads();
    if (!a.per_key_softmax) {
      float page_max = -INFINITY;
      for (int t = 0; t < n; ++t) page_max = tile_max(page_max, scores[t]);
      const float rescale = state.raise_max(page_max);
      if (rescale != 1.0f) {
        for (int e = 0; e < EPL; ++e) acc[e] = rn_mul(acc[e], rescale);
      }
    }
    float weight_sum = 0.0f;
    for (int t = 0; t < n; ++t) {
      float v[EPL];
      // A lane past head_dim reads nothing (a block decode would read its scale past the row).
      if (own_n > 0) {
        decode_span<EPL>(p.vf.format, p.values.unit(ps + t, kv_head), own, own_n, p.vf.scale, v, nullptr, 0, D);
      } else {
        for (int e = 0; e < EPL; ++e) v[e] = 0.0f;
      }
      if (a.value_to_f16) {
        for (int e = 0; e < EPL; ++e) v[e] = f16_rounded(v[e]);
      }
      if (a.per_key_softmax) {
        const OneRowStep step = one_row_step(scores[t], max_score, sum);
        if (a.f16_accumulator) {
          for (int e = 0; e < EPL; ++e) acc16[e] = one_row_accumulate_f16(step, acc16[e], v[e]);
        } else {
          for (int e = 0; e < EPL; ++e) acc[e] = one_row_accumulate(step, acc[e], v[e]);
        }
      } else {
        const float w = state.weight(scores[t]);
        weight_sum = rn_add(weight_sum, w);
        const float rounded = round_weight(a.weights, w);
        for (int e = 0; e < EPL; ++e) acc[e] = tile_accumulate(acc[e], rounded, v[e]);
      }
    }
    if (!a.per_key_softmax) state.add(weight_sum);
    __syncthreads();  // the next page rewrites the scores
  }

  // Normalize, then rotate rotated values back (finish_output) through shared memory.
  const float inv = softmax_normalizer(a.per_key_softmax ? sum : state.denom);
#pragma unroll
  for (int e = 0; e < EPL; ++e)
    if (e < own_n) row_s[own + e] = rn_mul(a.f16_accumulator ? f16_to_f32(acc16[e]) : acc[e], inv);
  __syncthreads();
  if (p.vf.rot) {
    if (lane == 0) rotate_inverse(*p.vf.rot, D, row_s, row_s);
    __syncthreads();
  }
  for (int i = lane; i < D; i += kWarp) p.out[static_cast<size_t>(row) * D + i] = row_s[i];
}

}  // namespace

void DevicePagedKv::Impl::arithmetic_attention(const AttentionArithmetic& arithmetic, int n_heads, const float* q,
                                               int n_queries, float softmax_scale, float* out) {
  const int D = shape.head_dim;
  const size_t shared = static_cast<size_t>(D + shape.page_tokens) * sizeof(float);
  if (shared > kSharedLimit)
    throw_usage_error("GPU engine attention: pages of " + std::to_string(shape.page_tokens) +
                      " tokens do not fit its shared memory (at most " +
                      std::to_string(kSharedLimit / sizeof(float) - D) + " at head_dim " + std::to_string(D) + ")");
  ArithmeticParams p{};
  p.keys = rows(key);
  p.values = rows(value);
  p.kf = args(key);
  p.vf = args(value);
  p.a = arithmetic;
  p.head_dim = D;
  p.n_tokens = length;
  p.n_heads = n_heads;
  p.group = n_heads / shape.n_kv_heads;
  p.n_queries = n_queries;
  p.page_tokens = shape.page_tokens;
  p.q = q;
  p.softmax_scale = softmax_scale;
  p.out = out;
  const unsigned blocks = static_cast<unsigned>(static_cast<size_t>(n_queries) * n_heads);
  const int epl = D <= 32 ? 1 : D <= 64 ? 2 : D <= 128 ? 4 : 8;
  switch (epl) {
    case 1: arithmetic_attention_kernel<1><<<blocks, kWarp, shared>>>(p); break;
    case 2: arithmetic_attention_kernel<2><<<blocks, kWarp, shared>>>(p); break;
    case 4: arithmetic_attention_kernel<4><<<blocks, kWarp, shared>>>(p); break;
    default: arithmetic_attention_kernel<8><<<blocks, kWarp, shared>>>(p); break;
  }
  check(gpuGetLastError(), "arithmetic attention launch");
}

}  // namespace kvgate::kernels::gpu
