#pragma once
// What the attention kernels share (the general kernel in gpu_attention.cu and the tile kernels
// of attention_tile.cuh and attention_prefill.cuh): their arguments, warp reductions, the query's rotation into the keys'
// stored basis and the output's rotation back, both once per block, and how a block writes its
// rows (the output, or a split's partial that gpu_attention.cu's merge folds in split order).
// GPU sources only (includes the vendor runtime).
#include <atomic>

#include "kernels/gpu/gpu_async.h"
#include "kernels/gpu/gpu_kv_impl.h"
#include "kernels/gpu/kv_tile.h"
#include "kernels/softmax_state.h"

namespace kvgate::kernels::gpu {

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
  int key_row_bytes, value_row_bytes;  // the tile kernels' row sizes (TurboQuant: its outlier count's)
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

// The block's query rows [row0, row0 + n_rows) of KV head kv_head (row g: position g / group,
// head g % group of the group), scaled by the softmax scale, into q_s[0..kRows) (rows past
// n_rows and columns past head_dim zero), then rotated into the keys' stored basis as the CPU
// codec's prepare_query does. scratch (kRows rows) is free for the duration.
template <int W>
__device__ void load_query_rows(const AttentionParams& p, float (*q_s)[W], float (*scratch)[W], int kRows, int n_rows,
                                int row0, int kv_head) {
  const int D = p.head_dim;
  for (int e = threadIdx.x; e < kRows * W; e += blockDim.x) {
    const int r = e / W, i = e % W;
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
  // instead (prepare_query).
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
    matrix_times_rows(q_matrix, q_s, scratch, kRows, D);
    __syncthreads();
    for (int e = threadIdx.x; e < kRows * D; e += blockDim.x) q_s[e / D][e % D] = scratch[e / D][e % D];
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
}

// The block's merged rows in acc_s (unnormalized, in the values' stored basis) and their softmax
// states (max and denominator per row, in shared memory: a row is picked at run time here, and
// an array of states in registers would go to local memory): rotated values back to the original basis (finish_output; linear, so each split's
// partial may be rotated before the splits merge), then written: the output itself when there is
// one split, else this split's partial.
template <int W>
__device__ void write_block_rows(const AttentionParams& p, float (*acc_s)[W], const float* block_max,
                                 const float* block_denom, int n_rows, int row0, int kv_head, int split) {
  const int D = p.head_dim;
  if (p.vf.rot) {
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
  for (int e = threadIdx.x; e < n_rows * D; e += blockDim.x) {
    const int r = e / D, i = e % D;
    const int g = row0 + r;
    const size_t out_row = static_cast<size_t>(g / p.group) * p.n_heads + kv_head * p.group + g % p.group;
    if (p.n_splits == 1) {
      p.out[out_row * D + i] = acc_s[r][i] * SoftmaxState{block_max[r], block_denom[r]}.normalizer();
    } else {
      float* part = p.partial + (static_cast<size_t>(split) * p.n_queries * p.n_heads + out_row) * (D + 2);
      part[i] = acc_s[r][i];
      if (i == 0) {
        part[D] = block_max[r];
        part[D + 1] = block_denom[r];
      }
    }
  }
}

// Stores the block's merged row states for write_block_rows (after a barrier that ends every read of
// the arrays), one thread per row, the row picked by an unrolled compare so `block` stays in registers.
template <int kRows>
__device__ __forceinline__ void store_block_states(const SoftmaxState (&block)[kRows], float* block_max, float* block_denom) {
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    if (threadIdx.x == r) {
      block_max[r] = block[r].max;
      block_denom[r] = block[r].denom;
    }
  __syncthreads();
}

// Issues the copies of one side's tile of tokens [t0, t_end) into `dst` (shared memory).
__device__ __forceinline__ void issue_tile_copies(const PagedRows& rows, int row_bytes, int kv_head, int t0, int t_end,
                                                  uint8_t* dst) {
  tile_runs(rows.page_table, rows.n_kv_heads, rows.page_tokens, row_bytes, kv_head, t0, t_end, [&](const TileRun& run) {
    const uint8_t* src = rows.pool + run.src;
#pragma unroll 1
    for (int c = threadIdx.x; c < run.bytes / kCopyBytes; c += blockDim.x)
      copy16_async(dst + tile_copy_dst(run, row_bytes, c), src + c * kCopyBytes);
  });
}

// Lets `kernel` take `shared_bytes` of dynamic shared memory: past 48 KiB a kernel must ask,
// once per size it grows to (`allowed`: that kernel's own record).
template <class Kernel>
void allow_dynamic_shared(Kernel kernel, int shared_bytes, std::atomic<int>& allowed, const char* what) {
  if (shared_bytes <= allowed.load()) return;
  check(gpuFuncSetAttribute(reinterpret_cast<const void*>(kernel), gpuFuncAttributeMaxDynamicSharedMemorySize,
                            shared_bytes),
        what);
  allowed.store(shared_bytes);
}

// The device's resident blocks per SM of `kernel` at this block size and shared memory.
template <class Kernel>
int resident_blocks_per_sm(Kernel kernel, int threads, int shared_bytes, const char* what) {
  int blocks = 0;
  check(gpuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared_bytes), what);
  return blocks;
}

// The tile kernels, by kind, key/value pair and head_dim (attention_<family>.cu). shared_bytes is
// a block's dynamic shared memory for the sides' row sizes; launch runs one call's grid (splits x
// KV heads x row blocks) with that much; blocks_per_sm is the device's occupancy for it.
struct TileKernel {
  int (*shared_bytes)(int key_row_bytes, int value_row_bytes);
  void (*launch)(const AttentionParams& p, dim3 grid, int shared_bytes);
  int (*blocks_per_sm)(int shared_bytes);
};
// The kernel of this kind, pair and head_dim, or null (kv_tile.h kKernelPairs, kKernelHeadDims).
const TileKernel* find_tile_kernel(KernelKinds kind, FormatId key, FormatId value, int head_dim);
// One lookup per family and kind, each in its translation unit (attention_<family>[_prefill].cu).
const TileKernel* find_decode_kernel_float16(FormatId key, FormatId value, int head_dim);
const TileKernel* find_prefill_kernel_float16(FormatId key, FormatId value, int head_dim);
const TileKernel* find_decode_kernel_fp8(FormatId key, FormatId value, int head_dim);
const TileKernel* find_prefill_kernel_fp8(FormatId key, FormatId value, int head_dim);
const TileKernel* find_decode_kernel_per_token_head(FormatId key, FormatId value, int head_dim);
const TileKernel* find_prefill_kernel_per_token_head(FormatId key, FormatId value, int head_dim);
const TileKernel* find_decode_kernel_ggml(FormatId key, FormatId value, int head_dim);
const TileKernel* find_prefill_kernel_ggml(FormatId key, FormatId value, int head_dim);
const TileKernel* find_decode_kernel_nvfp4(FormatId key, FormatId value, int head_dim);
const TileKernel* find_prefill_kernel_nvfp4(FormatId key, FormatId value, int head_dim);
const TileKernel* find_decode_kernel_turboquant(FormatId key, FormatId value, int head_dim);
const TileKernel* find_prefill_kernel_turboquant(FormatId key, FormatId value, int head_dim);

}  // namespace kvgate::kernels::gpu
