// One kernel source for CUDA (nvcc) and HIP (clang -xhip); see vendor.h.
//
// Attention (paged_attention_kernel) is flash-decoding over the paged cache. A thread block
// serves one KV head, one split of the sequence and up to kRows "rows" (query position x query
// head of the GQA group), so every page it loads is used by all the query heads sharing that KV
// head, and a prefill chunk is a grid of such row blocks. Each warp takes 32-token tiles: lane l
// scores token l against every row (q in shared memory), the warp updates each row's online
// softmax (kernels/softmax_state.h) with shuffles, then each lane accumulates its own span of
// head_dim over the tile's 32 values. Warps, then splits, are merged in a fixed order, so
// results do not vary run to run.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/gpu/gpu_kv_impl.h"
#include "kernels/softmax_state.h"

namespace kvgate::kernels::gpu {
namespace {

constexpr int kWarps = 4;  // warps per attention block
constexpr int kAttentionThreads = kWarp * kWarps;

struct AttentionParams {
  PagedRows keys, values;
  SideArgs kf, vf;
  int head_dim;
  int n_tokens;   // tokens in the cache
  int n_heads;    // query heads
  int group;      // query heads per KV head
  int n_queries;  // query positions, the last n_queries of the sequence
  const float* q;
  float softmax_scale;
  int split_tokens;
  int n_splits;
  float* partial;  // [n_splits][n_queries * n_heads][head_dim + 2]: acc, then max, sum
  float* out;      // [n_queries][n_heads][head_dim]
};

__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, gpu_shfl_xor(v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += gpu_shfl_xor(v, o);
  return v;
}

// The unnormalized Walsh-Hadamard transform (kv_rows.h: fwht) of rows [0, rows) of a shared
// array, its butterflies spread over the block's threads; with max_len, only the stages
// len < max_len (the transform of each block of max_len, rot=wht).
template <int W>
__device__ void fwht_shared_rows(float (*x)[W], int rows, int D, int max_len = 0) {
  const int limit = max_len > 0 ? max_len : D;
  for (int len = 1; len < limit; len <<= 1) {
    for (int e = threadIdx.x; e < rows * (D / 2); e += blockDim.x) {
      const int r = e / (D / 2), k = e % (D / 2);
      const int i = (k / len) * 2 * len + k % len;
      const float a = x[r][i], b = x[r][i + len];
      x[r][i] = a + b;
      x[r][i + len] = a - b;
    }
    __syncthreads();
  }
}

// out[r] = M x[r] for rows [0, rows) of shared arrays, M a D x D row-major matrix in device
// memory; one output element per thread at a time. out must not alias x. Columns D..W-1 of out
// are zeroed: a ragged last span reads them.
template <int W>
__device__ void matrix_times_rows(const float* m, const float (*x)[W], float (*out)[W], int rows, int D) {
  for (int e = threadIdx.x; e < rows * W; e += blockDim.x) {
    const int r = e / W, j = e % W;
    float s = 0.0f;
    if (j < D) {
      const float* m_row = m + static_cast<size_t>(j) * D;
      for (int i = 0; i < D; ++i) s = fmaf(m_row[i], x[r][i], s);
    }
    out[r][j] = s;
  }
}

// EPL: head_dim elements per lane (head_dim <= 32 * EPL); kRows: rows per block.
template <int EPL, int kRows>
__global__ void __launch_bounds__(kAttentionThreads) paged_attention_kernel(AttentionParams p) {
  __shared__ float q_s[kRows][EPL * kWarp];
  __shared__ float p_s[kWarps][kRows][kWarp];
  __shared__ float warp_m[kWarps][kRows], warp_l[kWarps][kRows];
  __shared__ float acc_s[kRows][EPL * kWarp];

  const int split = blockIdx.x, kv_head = blockIdx.y;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int D = p.head_dim;
  const int rows_per_kv_head = p.n_queries * p.group;
  const int row0 = blockIdx.z * kRows;
  const int n_rows = min(kRows, rows_per_kv_head - row0);
  const int first_pos = p.n_tokens - p.n_queries;

  int pos[kRows];  // each row's query position; rows past n_rows see nothing
#pragma unroll
  for (int r = 0; r < kRows; ++r) pos[r] = r < n_rows ? first_pos + (row0 + r) / p.group : -1;
  for (int e = threadIdx.x; e < kRows * EPL * kWarp; e += blockDim.x) {
    const int r = e / (EPL * kWarp), i = e % (EPL * kWarp);
    float v = 0.0f;
    if (r < n_rows && i < D) {
      const int g = row0 + r;
      const int head = kv_head * p.group + g % p.group;
      v = p.q[(static_cast<size_t>(g / p.group) * p.n_heads + head) * D + i] * p.softmax_scale;
    }
    q_s[r][i] = v;
  }
  __syncthreads();
  // TurboQuant keys and rotated ggml keys live in the rotated basis: rotate the scaled query
  // instead (prepare_query). rot=qr's dense Q goes through acc_s, free until the warps merge.
  const float* q_matrix = is_tq(p.kf.format) ? p.kf.tq->rotation_matrix : nullptr;
  const bool q_wht = p.kf.rot && p.kf.rot->block > 0;  // llama.cpp's plain blocks: scale, then butterflies
  const float* q_signs =
      q_matrix || q_wht ? nullptr : is_tq(p.kf.format) ? p.kf.tq->signs : p.kf.rot ? p.kf.rot->signs : nullptr;
  if (q_wht) {
    for (int e = threadIdx.x; e < kRows * D; e += blockDim.x) q_s[e / D][e % D] *= p.kf.rot->scale;
    __syncthreads();
    fwht_shared_rows(q_s, kRows, D, p.kf.rot->block);
  }
  if (q_matrix) {
    matrix_times_rows(q_matrix, q_s, acc_s, kRows, D);
    __syncthreads();
    for (int e = threadIdx.x; e < kRows * D; e += blockDim.x) q_s[e / D][e % D] = acc_s[e / D][e % D];
    __syncthreads();
  }
  if (q_signs) {
    const float q_rotation_scale = is_tq(p.kf.format) ? p.kf.tq->rotation_scale : p.kf.rot->scale;
    for (int e = threadIdx.x; e < kRows * D; e += blockDim.x) q_s[e / D][e % D] *= q_signs[e % D];
    __syncthreads();
    fwht_shared_rows(q_s, kRows, D);
    for (int e = threadIdx.x; e < kRows * D; e += blockDim.x) q_s[e / D][e % D] *= q_rotation_scale;
    __syncthreads();
  }
  // tqprod keys score against S q as well, shared by every key: computed once per row here
  // (TurboQuantProdCodec::dot_rows). acc_s is free until the warps merge after the token loop.
  const bool qjl = is_tqprod(p.kf.format);
  float (*sq_s)[EPL * kWarp] = acc_s;
  if (qjl) {
    matrix_times_rows(p.kf.tq->sketch, q_s, sq_s, kRows, D);
    __syncthreads();
  }

  const int split_begin = split * p.split_tokens;
  const int visible_end = min(p.n_tokens, first_pos + (row0 + n_rows - 1) / p.group + 1);
  const int split_end = min(split_begin + p.split_tokens, visible_end);

  SoftmaxState state[kRows];  // this warp's, per row
  float acc[kRows][EPL];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int e = 0; e < EPL; ++e) acc[r][e] = 0.0f;
  }
  const int own = lane * EPL;  // this lane's span of head_dim in the value pass
  const int own_n = max(0, min(EPL, D - own));

  for (int t0 = split_begin + warp * kWarp; t0 < split_end; t0 += kWarps * kWarp) {
    const int t = t0 + lane;
    const bool valid = t < split_end;
    float s[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) s[r] = 0.0f;
    if (valid) {
      const TokenRow key = token_row(p.keys, p.kf, t, kv_head, D);
      for (int i0 = 0; i0 < D; i0 += EPL) {
        float k[EPL];
        if (qjl) {
          float k_qjl[EPL];
          tqprod_spans<EPL>(*p.kf.tq, D, key.ptr, i0, min(EPL, D - i0), k, k_qjl);
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int e = 0; e < EPL; ++e) s[r] = fmaf(sq_s[r][i0 + e], k_qjl[e], s[r]);
        } else {
          decode_span<EPL>(key.format, key.ptr, i0, min(EPL, D - i0), p.kf.scale, k, p.kf.tq, key.sub, D);
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int e = 0; e < EPL; ++e) s[r] = fmaf(q_s[r][i0 + e], k[e], s[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (!valid || t > pos[r]) s[r] = -INFINITY;
      const float correction = state[r].raise_max(warp_max(s[r]));
      const float pr = state[r].weight(s[r]);
      state[r].add(warp_sum(pr));
#pragma unroll
      for (int e = 0; e < EPL; ++e) acc[r][e] *= correction;
      p_s[warp][r][lane] = pr;
    }
    gpu_syncwarp();
    const int tile_n = min(kWarp, split_end - t0);
    if (own_n > 0) {
      for (int j = 0; j < tile_n; ++j) {
        float v[EPL];
        const TokenRow value = token_row(p.values, p.vf, t0 + j, kv_head, D);
        decode_span<EPL>(value.format, value.ptr, own, own_n, p.vf.scale, v, p.vf.tq, value.sub, D);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float w = p_s[warp][r][j];
#pragma unroll
          for (int e = 0; e < EPL; ++e) acc[r][e] = fmaf(w, v[e], acc[r][e]);
        }
      }
    }
    gpu_syncwarp();
  }

  // Merge the warps in warp order.
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      warp_m[warp][r] = state[r].max;
      warp_l[warp][r] = state[r].denom;
    }
  }
  __syncthreads();
  SoftmaxState block[kRows];
  float factor[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    block[r] = merge_in_order(kWarps, [&](int w) { return SoftmaxState{warp_m[w][r], warp_l[w][r]}; });
    factor[r] = state[r].merge_weight(block[r].max);
  }
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int e = 0; e < EPL; ++e) {
          const float mine = acc[r][e] * factor[r];
          acc_s[r][own + e] = w == 0 ? mine : acc_s[r][own + e] + mine;
        }
    }
    __syncthreads();
  }
  if (p.vf.rot) {
    // Rotated values were accumulated in the rotated basis: rotate back (finish_output). It is
    // linear, so each split's partial may be rotated before the splits merge.
    const RotationParams& rot = *p.vf.rot;
    if (rot.block > 0) {
      for (int e = threadIdx.x; e < n_rows * D; e += blockDim.x) acc_s[e / D][e % D] *= rot.scale;
      __syncthreads();
      fwht_shared_rows(acc_s, n_rows, D, rot.block);
    } else {
      fwht_shared_rows(acc_s, n_rows, D);
      for (int e = threadIdx.x; e < n_rows * D; e += blockDim.x) acc_s[e / D][e % D] *= rot.scale * rot.signs[e % D];
      __syncthreads();
    }
  }

  // Write this block's rows: the output itself when there is one split, else a partial.
  for (int e = threadIdx.x; e < n_rows * D; e += blockDim.x) {
    const int r = e / D, i = e % D;
    const int g = row0 + r;
    const size_t out_row = static_cast<size_t>(g / p.group) * p.n_heads + kv_head * p.group + g % p.group;
    if (p.n_splits == 1) {
      p.out[out_row * D + i] = acc_s[r][i] * block[r].normalizer();
    } else {
      float* part = p.partial + (static_cast<size_t>(split) * p.n_queries * p.n_heads + out_row) * (D + 2);
      part[i] = acc_s[r][i];
      if (i == 0) {
        part[D] = block[r].max;
        part[D + 1] = block[r].denom;
      }
    }
  }
}

// One block per output row (query position x query head): splits merged in split order.
__global__ void merge_splits_kernel(int head_dim, int n_splits, size_t n_out_rows, const float* partial, float* out) {
  const size_t row = blockIdx.x;
  const int D = head_dim;
  auto split = [&](int s) {
    const float* part = partial + (s * n_out_rows + row) * (D + 2);
    return SoftmaxState{part[D], part[D + 1]};
  };
  const SoftmaxState merged = merge_in_order(n_splits, split);
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < n_splits; ++s) {
      const SoftmaxState st = split(s);
      if (st.max == -INFINITY) continue;
      acc = rn_add(acc, rn_mul(partial[(s * n_out_rows + row) * (D + 2) + i], st.merge_weight(merged.max)));
    }
    out[row * D + i] = acc * merged.normalizer();
  }
}

template <int EPL, int kRows>
void launch_attention(const AttentionParams& p, int n_kv_heads) {
  const int row_blocks = (p.n_queries * p.group + kRows - 1) / kRows;
  paged_attention_kernel<EPL, kRows><<<dim3(p.n_splits, n_kv_heads, row_blocks), kAttentionThreads>>>(p);
}

int multiprocessor_count() {
  static const int count = [] {
    gpuDeviceProp_t prop;
    return gpuGetDeviceProperties(&prop, 0) == gpuSuccess ? prop.multiProcessorCount : 1;
  }();
  return count;
}

}  // namespace

void DevicePagedKv::attention_device(int n_heads, const float* q, int n_queries, float softmax_scale, float* out,
                                     int split_tokens) {
  Impl& m = *impl_;
  const PagedKvShape& s = m.shape;
  if (n_heads < 1 || n_heads % s.n_kv_heads != 0)
    throw_usage_error("GPU attention: " + std::to_string(n_heads) + " query heads are not a multiple of the cache's " +
                      std::to_string(s.n_kv_heads) + " KV heads");
  if (n_queries < 1 || n_queries > m.length)
    throw_usage_error("GPU attention: " + std::to_string(n_queries) + " queries, but the cache holds " +
                      std::to_string(m.length) + " tokens (append a chunk's K/V before attending)");
  if (split_tokens < 0 || split_tokens % kWarp != 0)
    throw_usage_error("GPU attention: split_tokens must be 0 or a positive multiple of 32, got " +
                      std::to_string(split_tokens));
  // An engine whose kernel rounds something takes its own path (gpu_attention_arithmetic.cu), as
  // on the CPU; exact arithmetic stays on this one.
  if (s.arithmetic != Arithmetic::exact) {
    const AttentionArithmetic arithmetic = kv_arithmetic(s, n_queries);
    if (!arithmetic.exact()) return m.engine_attention(arithmetic, n_heads, q, n_queries, softmax_scale, out);
  }
  AttentionParams p{};
  p.keys = m.rows(m.key);
  p.values = m.rows(m.value);
  p.kf = m.args(m.key);
  p.vf = m.args(m.value);
  p.head_dim = s.head_dim;
  p.n_tokens = m.length;
  p.n_heads = n_heads;
  p.group = n_heads / s.n_kv_heads;
  p.n_queries = n_queries;
  p.q = q;
  p.softmax_scale = softmax_scale;
  const int epl = s.head_dim <= 32 ? 1 : s.head_dim <= 64 ? 2 : s.head_dim <= 128 ? 4 : 8;
  // A decode step of a small GQA group (Llama-3's 4 query heads per KV head) fills 4 rows: a
  // 16-row block would spend 3/4 of its FMAs and registers on empty rows. Rows are independent
  // (each has its own scores, softmax and accumulators, summed in the same order), so the block
  // size does not change any result.
  const int rows_per_kv_head = n_queries * p.group;
  const int rows = rows_per_kv_head <= 4 ? 4 : epl == 8 ? 8 : 16;
  if (split_tokens == 0) {
    // Enough splits that the grid covers the device about twice, none shorter than 256 tokens.
    const int row_blocks = (n_queries * p.group + rows - 1) / rows;
    const int base_blocks = row_blocks * s.n_kv_heads;
    const int want = std::max(1, (2 * multiprocessor_count() + base_blocks - 1) / base_blocks);
    const int max_splits = std::max(1, m.length / 256);
    const int splits = std::min(want, max_splits);
    split_tokens = ((m.length + splits - 1) / splits + kWarp - 1) / kWarp * kWarp;
  }
  p.split_tokens = split_tokens;
  p.n_splits = (m.length + split_tokens - 1) / split_tokens;
  p.out = out;
  const size_t out_rows = static_cast<size_t>(n_queries) * n_heads;
  if (p.n_splits > 1) {
    m.partial.resize(static_cast<size_t>(p.n_splits) * out_rows * (s.head_dim + 2) * sizeof(float));
    p.partial = m.partial.as<float>();
  }
  switch (epl * 100 + rows) {
    case 104: launch_attention<1, 4>(p, s.n_kv_heads); break;
    case 204: launch_attention<2, 4>(p, s.n_kv_heads); break;
    case 404: launch_attention<4, 4>(p, s.n_kv_heads); break;
    case 804: launch_attention<8, 4>(p, s.n_kv_heads); break;
    case 116: launch_attention<1, 16>(p, s.n_kv_heads); break;
    case 216: launch_attention<2, 16>(p, s.n_kv_heads); break;
    case 416: launch_attention<4, 16>(p, s.n_kv_heads); break;
    default: launch_attention<8, 8>(p, s.n_kv_heads); break;
  }
  check(gpuGetLastError(), "attention launch");
  if (p.n_splits > 1) {
    merge_splits_kernel<<<static_cast<unsigned>(out_rows), 128>>>(s.head_dim, p.n_splits, out_rows, p.partial, out);
    check(gpuGetLastError(), "attention merge launch");
  }
}

void DevicePagedKv::attention(int n_heads, const float* q, int n_queries, float softmax_scale, float* out,
                              int split_tokens) {
  Impl& m = *impl_;
  const size_t bytes = static_cast<size_t>(std::max(n_queries, 0)) * std::max(n_heads, 0) * m.shape.head_dim * sizeof(float);
  m.staging_q.resize(bytes);
  m.staging_out.resize(bytes);
  if (bytes) check(gpuMemcpy(m.staging_q.ptr, q, bytes, gpuMemcpyHostToDevice), "upload queries");
  attention_device(n_heads, m.staging_q.as<float>(), n_queries, softmax_scale, m.staging_out.as<float>(), split_tokens);
  check(gpuMemcpy(out, m.staging_out.ptr, bytes, gpuMemcpyDeviceToHost), "download attention");
}

double DevicePagedKv::time_attention_ms(int n_heads, int n_queries, int iterations, int split_tokens) {
  Impl& m = *impl_;
  const size_t floats = static_cast<size_t>(n_queries) * n_heads * m.shape.head_dim;
  DeviceBuffer q(floats * sizeof(float)), out(floats * sizeof(float));
  std::vector<float> host(floats);
  for (size_t i = 0; i < floats; ++i) host[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  check(gpuMemcpy(q.ptr, host.data(), floats * sizeof(float), gpuMemcpyHostToDevice), "upload queries");
  const float scale = 1.0f / std::sqrt(static_cast<float>(m.shape.head_dim));
  return time_ms(iterations, [&] { attention_device(n_heads, q.as<float>(), n_queries, scale, out.as<float>(), split_tokens); });
}

}  // namespace kvgate::kernels::gpu
