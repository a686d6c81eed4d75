// One kernel source for CUDA (nvcc) and HIP (clang -xhip); see vendor.h.
//
// Quantization runs kernels/gpu/kv_rows.h one thread per row, so its bytes are the CPU codec's
// (no FMA contraction: kernels/gpu/CMakeLists.txt passes --fmad=false / -ffp-contract=off, and
// kv_rows.h rounds each operation explicitly).
//
// Attention (paged_attention_kernel) is flash-decoding over the paged cache. A thread block
// serves one KV head, one split of the sequence and up to kRows "rows" (query position x query
// head of the GQA group), so every page it loads is used by all the query heads sharing that KV
// head, and a prefill chunk is a grid of such row blocks. Each warp takes 32-token tiles: lane l
// scores token l against every row (q in shared memory), the warp updates each row's online
// softmax with shuffles, then each lane accumulates its own span of head_dim over the tile's 32
// values. Warps, then splits, are merged in a fixed order, so results do not vary run to run.
#include "kernels/gpu/gpu_kv.h"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <utility>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "kernels/gpu/vendor.h"

namespace kvgate::kernels::gpu {
namespace {

constexpr int kWarp = 32;
constexpr int kWarps = 4;  // warps per attention block
constexpr int kAttentionThreads = kWarp * kWarps;
constexpr int kRowThreads = 128;  // quantize/append: one thread per row

void check(gpuError_t err, const char* what) {
  if (err != gpuSuccess)
    throw_environment_error(std::string("GPU ") + KVGATE_GPU_VENDOR + " " + what + ": " + gpuGetErrorString(err));
}

struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void release() {
    if (ptr) (void)gpuFree(ptr);  // nothing useful to do with a failure here
    ptr = nullptr;
    bytes = 0;
  }
  void resize(size_t n) {
    if (n <= bytes && ptr) return;
    release();
    check(gpuMalloc(&ptr, n ? n : 1), "malloc");
    bytes = n;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

unsigned blocks_for(size_t items, int threads) { return static_cast<unsigned>((items + threads - 1) / threads); }

// tq: TurboQuant constants in device memory, or null for the other formats.
__global__ void quantize_rows_kernel(KvFormat f, int head_dim, float scale, const TqParams* tq, const float* x,
                                     size_t n_rows, uint8_t* out) {
  const size_t r = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n_rows) return;
  encode_row(f, head_dim, scale, x + r * head_dim, out + r * row_bytes(f, head_dim, tq), tq);
}

__global__ void dequantize_rows_kernel(KvFormat f, int head_dim, float scale, const TqParams* tq, const uint8_t* in,
                                       size_t n_rows, float* y) {
  const size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n_rows * head_dim) return;
  const size_t r = e / head_dim;
  y[e] = decode_element(f, in + r * row_bytes(f, head_dim, tq), static_cast<int>(e % head_dim), scale, tq, 0, head_dim);
}

// A TurboQuant codec's constants in device memory: copies of its matrices, and of its params
// pointing at the copies.
struct DeviceTq {
  DeviceBuffer params, sketch, rotation;

  static void upload_matrix(DeviceBuffer& dst, const std::vector<float>& m, const float** ptr, const char* what) {
    dst.resize(m.size() * sizeof(float));
    check(gpuMemcpy(dst.ptr, m.data(), m.size() * sizeof(float), gpuMemcpyHostToDevice), what);
    *ptr = dst.as<float>();
  }
  void upload(const TqConstants& c) {
    TqParams p = c.params;
    if (c.sketch) upload_matrix(sketch, *c.sketch, &p.sketch, "upload QJL sketch");
    if (c.rotation_matrix) upload_matrix(rotation, *c.rotation_matrix, &p.rotation_matrix, "upload rotation matrix");
    params.resize(sizeof(TqParams));
    check(gpuMemcpy(params.ptr, &p, sizeof(TqParams), gpuMemcpyHostToDevice), "upload TurboQuant constants");
  }
  const TqParams* get() const { return params.as<TqParams>(); }
};

// ---- the paged cache ----

// A side's pool: each page holds page_tokens / group units per KV head (a unit is one row, or
// for KIVI keys one group of tokens).
struct PagedRows {
  uint8_t* pool;
  size_t unit_bytes;
  const int32_t* page_table;
  int n_kv_heads;
  int page_tokens;
  int group;

  __device__ __forceinline__ uint8_t* unit(int token, int kv_head) const {
    const size_t page = static_cast<size_t>(page_table[token / page_tokens]);
    const int units = page_tokens / group;
    return pool + ((page * n_kv_heads + kv_head) * units + (token % page_tokens) / group) * unit_bytes;
  }
};

// A side's format as the kernels see it: tq and rot point at the constants in device memory.
struct SideArgs {
  KvFormat format;
  float scale;
  const TqParams* tq;
  const RotationParams* rot;  // null unless a ggml side stores rotated rows
  const uint16_t* window;  // KIVI: every token's f16 row, [token][kv_head][head_dim]; else null
  int quantized;           // KIVI: tokens below this are in the units, the rest in the window
};

// Where token t's row of one side is read from, and as what.
struct TokenRow {
  const uint8_t* ptr;
  KvFormat format;
  int sub;  // the token's index inside its KIVI key group
};

__device__ __forceinline__ TokenRow token_row(const PagedRows& rows, const SideArgs& side, int t, int kv_head,
                                              int head_dim) {
  if (side.window && t >= side.quantized)
    return {reinterpret_cast<const uint8_t*>(side.window + (static_cast<size_t>(t) * rows.n_kv_heads + kv_head) * head_dim),
            KvFormat::f16, 0};
  return {rows.unit(t, kv_head), side.format, t % rows.group};
}

// One thread per (new token, KV head, K or V) row.
__global__ void append_kernel(PagedRows keys, PagedRows values, SideArgs kf, SideArgs vf, int head_dim,
                              const float* k, const float* v, int first_token, int n_new) {
  const size_t item = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t rows = static_cast<size_t>(n_new) * keys.n_kv_heads;
  if (item >= 2 * rows) return;
  const bool is_value = item >= rows;
  const size_t r = is_value ? item - rows : item;
  const int token = first_token + static_cast<int>(r / keys.n_kv_heads);
  const int head = static_cast<int>(r % keys.n_kv_heads);
  const float* src = (is_value ? v : k) + r * head_dim;
  const SideArgs& side = is_value ? vf : kf;
  if (side.window) {
    // KIVI: the new token goes to the f16 window; whole groups leave it in window_to_units_kernel.
    uint16_t* dst = const_cast<uint16_t*>(side.window) + (static_cast<size_t>(token) * keys.n_kv_heads + head) * head_dim;
    for (int i = 0; i < head_dim; ++i) dst[i] = f32_to_f16(src[i]);
    return;
  }
  if (is_value) encode_row(vf.format, head_dim, vf.scale, src, values.unit(token, head), vf.tq, vf.rot);
  else encode_row(kf.format, head_dim, kf.scale, src, keys.unit(token, head), kf.tq, kf.rot);
}

// KIVI: quantizes the units of tokens [first, last) from the f16 window, one thread per
// (unit, KV head), exactly as the CPU cache does when a group leaves its window.
__global__ void window_to_units_kernel(PagedRows rows, SideArgs side, int head_dim, int first, int last) {
  const size_t item = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int units = (last - first) / rows.group;
  if (item >= static_cast<size_t>(units) * rows.n_kv_heads) return;
  const int token = first + static_cast<int>(item / rows.n_kv_heads) * rows.group;
  const int head = static_cast<int>(item % rows.n_kv_heads);
  const uint16_t* window = side.window + (static_cast<size_t>(token) * rows.n_kv_heads + head) * head_dim;
  uint8_t* dst = rows.unit(token, head);
  if (is_kivi_key(side.format)) {
    encode_kivi_key_group(kivi_bits(side.format), head_dim, rows.group, window,
                          static_cast<size_t>(rows.n_kv_heads) * head_dim, dst);
  } else {
    float x[kMaxKvHeadDim];
    for (int i = 0; i < head_dim; ++i) x[i] = f16_to_f32(window[i]);
    encode_kivi_value(kivi_bits(side.format), head_dim, x, dst);
  }
}

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
// array, its butterflies spread over the block's threads.
template <int W>
__device__ void fwht_shared_rows(float (*x)[W], int rows, int D) {
  for (int len = 1; len < D; len <<= 1) {
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
  const float* q_signs = q_matrix ? nullptr : is_tq(p.kf.format) ? p.kf.tq->signs : p.kf.rot ? p.kf.rot->signs : nullptr;
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

  float m_run[kRows], l_run[kRows], acc[kRows][EPL];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m_run[r] = -INFINITY;
    l_run[r] = 0.0f;
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
      const float m_new = fmaxf(m_run[r], warp_max(s[r]));
      // A row that has seen nothing yet keeps m = -inf and weight 0 (no exp(-inf - -inf)).
      const float pr = m_new == -INFINITY ? 0.0f : expf(s[r] - m_new);
      const float correction = m_new == -INFINITY ? 1.0f : expf(m_run[r] - m_new);
      l_run[r] = l_run[r] * correction + warp_sum(pr);
      m_run[r] = m_new;
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
      warp_m[warp][r] = m_run[r];
      warp_l[warp][r] = l_run[r];
    }
  }
  __syncthreads();
  float block_m[kRows], block_l[kRows], factor[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    block_m[r] = -INFINITY;
    for (int w = 0; w < kWarps; ++w) block_m[r] = fmaxf(block_m[r], warp_m[w][r]);
    block_l[r] = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (warp_m[w][r] != -INFINITY) block_l[r] += warp_l[w][r] * expf(warp_m[w][r] - block_m[r]);
    factor[r] = m_run[r] == -INFINITY ? 0.0f : expf(m_run[r] - block_m[r]);
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
    fwht_shared_rows(acc_s, n_rows, D);
    for (int e = threadIdx.x; e < n_rows * D; e += blockDim.x) acc_s[e / D][e % D] *= rot.scale * rot.signs[e % D];
    __syncthreads();
  }

  // Write this block's rows: the output itself when there is one split, else a partial.
  for (int e = threadIdx.x; e < n_rows * D; e += blockDim.x) {
    const int r = e / D, i = e % D;
    const int g = row0 + r;
    const size_t out_row = static_cast<size_t>(g / p.group) * p.n_heads + kv_head * p.group + g % p.group;
    if (p.n_splits == 1) {
      p.out[out_row * D + i] = acc_s[r][i] / block_l[r];
    } else {
      float* part = p.partial + (static_cast<size_t>(split) * p.n_queries * p.n_heads + out_row) * (D + 2);
      part[i] = acc_s[r][i];
      if (i == 0) {
        part[D] = block_m[r];
        part[D + 1] = block_l[r];
      }
    }
  }
}

// One block per output row (query position x query head): splits merged in split order.
__global__ void merge_splits_kernel(int head_dim, int n_splits, size_t n_out_rows, const float* partial, float* out) {
  const size_t row = blockIdx.x;
  const int D = head_dim;
  float m = -INFINITY;
  for (int s = 0; s < n_splits; ++s) m = fmaxf(m, partial[(s * n_out_rows + row) * (D + 2) + D]);
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float acc = 0.0f, l = 0.0f;
    for (int s = 0; s < n_splits; ++s) {
      const float* part = partial + (s * n_out_rows + row) * (D + 2);
      if (part[D] == -INFINITY) continue;
      const float w = expf(part[D] - m);
      acc += part[i] * w;
      l += part[D + 1] * w;
    }
    out[row * D + i] = acc / l;
  }
}

void require_scale(KvFormat f, float scale) {
  if ((is_per_tensor_fp8(f) || f == KvFormat::nvfp4) && !(scale > 0.0f && scale < FLT_MAX))
    throw_usage_error(std::string("GPU KV format ") + kv_format_name(f) +
                      ": scale must be a positive finite number, got " + std::to_string(scale));
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

const char* kv_format_name(KvFormat format) {
  const char* name = format_name(format);
  if (name[0] != '?') return name;
  throw_usage_error("GPU KV format: unknown enumerator " + std::to_string(static_cast<int>(format)));
}

std::optional<KvFormat> kv_format_named(std::string_view name) {
  for (KvFormat f : kAllKvFormats)
    if (name == kv_format_name(f)) return f;
  return std::nullopt;
}

size_t kv_row_bytes(KvFormat format, int head_dim) {
  if (head_dim < 1 || head_dim > kMaxKvHeadDim)
    throw_usage_error(std::string("GPU KV format ") + kv_format_name(format) + ": head_dim must be in 1.." +
                      std::to_string(kMaxKvHeadDim) + ", got " + std::to_string(head_dim));
  if (is_ggml(format) && head_dim % kGgmlBlock != 0)
    throw_usage_error(std::string("GPU KV format ") + kv_format_name(format) + ": head_dim must be a multiple of 32, got " +
                      std::to_string(head_dim));
  const int multiple = format == KvFormat::int4_pth || format == KvFormat::u4 ? 2
                       : format == KvFormat::u2                              ? 4
                       : format == KvFormat::u3                              ? 8
                       : is_kivi_value(format)                               ? kKiviValueChannelGroup
                       : format == KvFormat::nvfp4                           ? kNvfp4Block
                       : format == KvFormat::tq2_5 || format == KvFormat::tq3_5 ? 4  // head_dim / 4 outliers
                                                                             : 1;
  if (head_dim % multiple != 0)
    throw_usage_error(std::string("GPU KV format ") + kv_format_name(format) + ": head_dim must be a multiple of " +
                      std::to_string(multiple) + ", got " + std::to_string(head_dim));
  return row_bytes(format, head_dim);
}

namespace {
void require_plain(KvFormat format, const char* what) {
  if (is_tq(format) || is_kivi(format))
    throw_usage_error(std::string("GPU ") + what + ": " + kv_format_name(format) +
                      (is_tq(format) ? " needs its codec constants (the overload taking TqConstants)"
                                     : " is stored through a window and token groups; use DevicePagedKv"));
}

// TurboQuant constants that fit `format` at head_dim: what make_tq_params builds for it.
void require_tq(KvFormat format, int head_dim, const std::optional<TqConstants>& tq, const std::string& what) {
  const size_t square = static_cast<size_t>(head_dim) * head_dim;
  auto matches = [&](const std::shared_ptr<const std::vector<float>>& m, const float* ptr) {
    return ptr == nullptr ? !m : m && m->size() == square && ptr == m->data();
  };
  if (is_tq(format) != tq.has_value() ||
      (tq && (tq->params.bits != tq_bits(format) || tq->params.outliers < 0 || tq->params.outliers > head_dim ||
              is_tqprod(format) != (tq->params.sketch != nullptr) || !matches(tq->sketch, tq->params.sketch) ||
              !matches(tq->rotation_matrix, tq->params.rotation_matrix))))
    throw_usage_error(what + ": " + kv_format_name(format) +
                      (is_tq(format) ? " needs matching TurboQuant constants (make_tq_params)"
                                     : " takes no TurboQuant constants"));
  if (is_tq(format) && (head_dim > kTqMaxHeadDim || (!tq->rotation_matrix && (head_dim & (head_dim - 1)) != 0)))
    throw_usage_error(what + ": TurboQuant keys need a head_dim up to " + std::to_string(kTqMaxHeadDim) +
                      ", a power of two with the Walsh-Hadamard rotation; got " + std::to_string(head_dim));
}

void quantize_on_device(KvFormat format, int head_dim, float scale, const std::optional<TqConstants>& tq,
                        const float* x, size_t n_rows, uint8_t* out) {
  const size_t bytes = row_bytes(format, head_dim, tq ? &tq->params : nullptr);
  if (n_rows == 0) return;
  DeviceTq dtq;
  if (tq) dtq.upload(*tq);
  DeviceBuffer dx(n_rows * head_dim * sizeof(float)), dout(n_rows * bytes);
  check(gpuMemcpy(dx.ptr, x, n_rows * head_dim * sizeof(float), gpuMemcpyHostToDevice), "upload");
  quantize_rows_kernel<<<blocks_for(n_rows, kRowThreads), kRowThreads>>>(format, head_dim, scale, tq ? dtq.get() : nullptr,
                                                                           dx.as<float>(), n_rows, dout.as<uint8_t>());
  check(gpuGetLastError(), "quantize launch");
  check(gpuMemcpy(out, dout.ptr, n_rows * bytes, gpuMemcpyDeviceToHost), "download");
}

void dequantize_on_device(KvFormat format, int head_dim, float scale, const std::optional<TqConstants>& tq,
                          const uint8_t* in, size_t n_rows, float* y) {
  const size_t bytes = row_bytes(format, head_dim, tq ? &tq->params : nullptr);
  if (n_rows == 0) return;
  DeviceTq dtq;
  if (tq) dtq.upload(*tq);
  const size_t n = n_rows * head_dim;
  DeviceBuffer din(n_rows * bytes), dy(n * sizeof(float));
  check(gpuMemcpy(din.ptr, in, n_rows * bytes, gpuMemcpyHostToDevice), "upload");
  dequantize_rows_kernel<<<blocks_for(n, kRowThreads), kRowThreads>>>(format, head_dim, scale, tq ? dtq.get() : nullptr,
                                                                        din.as<uint8_t>(), n_rows, dy.as<float>());
  check(gpuGetLastError(), "dequantize launch");
  check(gpuMemcpy(y, dy.ptr, n * sizeof(float), gpuMemcpyDeviceToHost), "download");
}
}  // namespace

void quantize_rows(KvFormat format, int head_dim, float scale, const float* x, size_t n_rows, uint8_t* out) {
  kv_row_bytes(format, head_dim);  // validates head_dim for the format
  require_plain(format, "quantize_rows");
  require_scale(format, scale);
  quantize_on_device(format, head_dim, scale, std::nullopt, x, n_rows, out);
}

void dequantize_rows(KvFormat format, int head_dim, float scale, const uint8_t* in, size_t n_rows, float* y) {
  kv_row_bytes(format, head_dim);
  require_plain(format, "dequantize_rows");
  require_scale(format, scale);
  dequantize_on_device(format, head_dim, scale, std::nullopt, in, n_rows, y);
}

void quantize_rows(KvFormat format, int head_dim, const TqConstants& tq, const float* x, size_t n_rows, uint8_t* out) {
  kv_row_bytes(format, head_dim);
  require_tq(format, head_dim, tq, "GPU quantize_rows");
  quantize_on_device(format, head_dim, 1.0f, tq, x, n_rows, out);
}

void dequantize_rows(KvFormat format, int head_dim, const TqConstants& tq, const uint8_t* in, size_t n_rows, float* y) {
  kv_row_bytes(format, head_dim);
  require_tq(format, head_dim, tq, "GPU dequantize_rows");
  dequantize_on_device(format, head_dim, 1.0f, tq, in, n_rows, y);
}

// One side (K or V) of the cache: its pool of units, TurboQuant constants, and for KIVI the f16
// window of every token and how many tokens have left it into the units.
struct SideStore {
  KvSideFormat format;
  size_t unit_bytes = 0;
  int group = 1;     // tokens per unit
  int residual = 0;  // KIVI: the newest tokens kept in f16
  bool windowed = false;
  int quantized = 0;
  DeviceBuffer pool, rot, window;
  DeviceTq tq;

  // Tokens in units after n tokens: whole groups that left the R-token window (the CPU cache's
  // rule), or every token for the other formats.
  int quantized_for(int n) const { return !windowed ? n : n > residual ? (n - residual) / group * group : 0; }
};

struct DevicePagedKv::Impl {
  PagedKvShape shape;
  int capacity = 0;
  int length = 0;
  int pages = 0;
  SideStore key, value;
  DeviceBuffer page_table;
  DeviceBuffer staging_k, staging_v, staging_q, staging_out, partial;
  std::vector<int32_t> order;

  SideArgs args(const SideStore& s) const {
    return SideArgs{s.format.format, s.format.scale, s.format.tq ? s.tq.get() : nullptr,
                    s.format.rotation ? s.rot.as<RotationParams>() : nullptr,
                    s.windowed ? s.window.as<uint16_t>() : nullptr, s.quantized};
  }
  PagedRows rows(const SideStore& s) const {
    return PagedRows{s.pool.as<uint8_t>(), s.unit_bytes, page_table.as<int32_t>(), shape.n_kv_heads, shape.page_tokens,
                     s.group};
  }
  size_t unit_offset(const SideStore& s, int token, int kv_head) const {
    const size_t page = static_cast<size_t>(order[token / shape.page_tokens]);
    const int units = shape.page_tokens / s.group;
    return ((page * shape.n_kv_heads + kv_head) * units + (token % shape.page_tokens) / s.group) * s.unit_bytes;
  }
  // Units up to the side's new quantized count leave the window (KIVI).
  void flush_window(SideStore& s) {
    const int target = s.quantized_for(length);
    if (!s.windowed || target <= s.quantized) return;
    const size_t items = static_cast<size_t>((target - s.quantized) / s.group) * shape.n_kv_heads;
    window_to_units_kernel<<<blocks_for(items, kRowThreads), kRowThreads>>>(rows(s), args(s), shape.head_dim, s.quantized,
                                                                          target);
    check(gpuGetLastError(), "KIVI group launch");
    s.quantized = target;
  }

  std::vector<uint8_t> download_unit(const SideStore& s, int token, int kv_head) const {
    if (token < 0 || token >= length || kv_head < 0 || kv_head >= shape.n_kv_heads)
      throw_usage_error("GPU paged KV: no row for token " + std::to_string(token) + ", head " + std::to_string(kv_head));
    if (s.windowed && token >= s.quantized)
      throw_usage_error("GPU paged KV: token " + std::to_string(token) + " is still in the f16 window (" +
                        std::to_string(s.quantized) + " tokens quantized)");
    std::vector<uint8_t> unit(s.unit_bytes);
    check(gpuMemcpy(unit.data(), s.pool.as<uint8_t>() + unit_offset(s, token, kv_head), s.unit_bytes,
                    gpuMemcpyDeviceToHost),
          "download row");
    return unit;
  }
};

namespace {
void init_side(SideStore& s, const KvSideFormat& f, const PagedKvShape& shape, bool is_key) {
  s.format = f;
  require_scale(f.format, f.scale);
  require_tq(f.format, shape.head_dim, f.tq, "GPU paged KV");
  if (f.rotation && (!is_ggml(f.format) || (shape.head_dim & (shape.head_dim - 1)) != 0))
    throw_usage_error(std::string("GPU paged KV: ") + kv_format_name(f.format) +
                      (is_ggml(f.format) ? " with a Hadamard rotation needs a power-of-two head_dim, got " +
                                               std::to_string(shape.head_dim)
                                         : std::string(" takes no Hadamard rotation")));
  if ((is_tq(f.format) || is_kivi_key(f.format)) && !is_key)
    throw_usage_error(std::string("GPU paged KV: ") + kv_format_name(f.format) + " stores keys only");
  if (is_kivi_value(f.format) && is_key)
    throw_usage_error(std::string("GPU paged KV: ") + kv_format_name(f.format) + " stores values only");
  s.windowed = is_kivi(f.format);
  s.group = is_kivi_key(f.format) ? (f.group > 0 ? f.group : kKiviDefaultGroup) : 1;
  s.residual = s.windowed ? f.residual : 0;
  kv_row_bytes(f.format, shape.head_dim);  // validates head_dim for the format
  if (s.windowed && (s.residual < 0 || shape.page_tokens % s.group != 0))
    throw_usage_error(std::string("GPU paged KV: ") + kv_format_name(f.format) + " needs residual >= 0 and a group (" +
                      std::to_string(s.group) + ") dividing the page (" + std::to_string(shape.page_tokens) + " tokens)");
  s.unit_bytes = unit_bytes(f.format, shape.head_dim, s.group, f.tq ? &f.tq->params : nullptr);
}
}  // namespace

DevicePagedKv::DevicePagedKv(const PagedKvShape& shape, int capacity_tokens, std::vector<int32_t> page_order)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.shape = shape;
  if (shape.n_kv_heads < 1 || shape.page_tokens < 1 || capacity_tokens < 1)
    throw_usage_error("GPU paged KV: n_kv_heads, page_tokens and capacity must be >= 1, got " +
                      std::to_string(shape.n_kv_heads) + ", " + std::to_string(shape.page_tokens) + ", " +
                      std::to_string(capacity_tokens));
  init_side(m.key, shape.key, shape, true);
  init_side(m.value, shape.value, shape, false);
  m.capacity = capacity_tokens;
  m.pages = (capacity_tokens + shape.page_tokens - 1) / shape.page_tokens;
  if (page_order.empty()) {
    page_order.resize(m.pages);
    for (int i = 0; i < m.pages; ++i) page_order[i] = i;
  }
  std::vector<bool> seen(m.pages, false);
  if (static_cast<int>(page_order.size()) != m.pages)
    throw_usage_error("GPU paged KV: page order has " + std::to_string(page_order.size()) + " pages, the capacity needs " +
                      std::to_string(m.pages));
  for (int32_t page : page_order) {
    if (page < 0 || page >= m.pages || seen[page])
      throw_usage_error("GPU paged KV: page order is not a permutation of 0.." + std::to_string(m.pages - 1));
    seen[page] = true;
  }
  m.order = page_order;
  const size_t tokens = static_cast<size_t>(m.pages) * shape.page_tokens;
  for (SideStore* side : {&m.key, &m.value}) {
    side->pool.resize(tokens / side->group * shape.n_kv_heads * side->unit_bytes);
    if (side->format.tq) side->tq.upload(*side->format.tq);
    if (side->format.rotation) {
      side->rot.resize(sizeof(RotationParams));
      check(gpuMemcpy(side->rot.ptr, &*side->format.rotation, sizeof(RotationParams), gpuMemcpyHostToDevice),
            "upload rotation");
    }
    if (side->windowed) side->window.resize(tokens * shape.n_kv_heads * shape.head_dim * sizeof(uint16_t));
  }
  m.page_table.resize(page_order.size() * sizeof(int32_t));
  check(gpuMemcpy(m.page_table.ptr, page_order.data(), page_order.size() * sizeof(int32_t), gpuMemcpyHostToDevice),
        "upload page table");
}

DevicePagedKv::~DevicePagedKv() = default;

const PagedKvShape& DevicePagedKv::shape() const { return impl_->shape; }
int DevicePagedKv::length() const { return impl_->length; }
int DevicePagedKv::capacity() const { return impl_->capacity; }
size_t DevicePagedKv::kv_bytes_per_token() const {
  const Impl& m = *impl_;
  return (m.key.unit_bytes / m.key.group + m.value.unit_bytes / m.value.group) * static_cast<size_t>(m.shape.n_kv_heads);
}

void DevicePagedKv::append_device(const float* k, const float* v, int n_new) {
  Impl& m = *impl_;
  if (n_new < 0 || n_new > m.capacity - m.length)
    throw_usage_error("GPU paged KV: cannot append " + std::to_string(n_new) + " tokens to " + std::to_string(m.length) +
                      " of capacity " + std::to_string(m.capacity));
  if (n_new == 0) return;
  const size_t items = 2 * static_cast<size_t>(n_new) * m.shape.n_kv_heads;
  append_kernel<<<blocks_for(items, kRowThreads), kRowThreads>>>(m.rows(m.key), m.rows(m.value), m.args(m.key),
                                                                  m.args(m.value), m.shape.head_dim, k, v, m.length, n_new);
  check(gpuGetLastError(), "append launch");
  m.length += n_new;
  m.flush_window(m.key);
  m.flush_window(m.value);
}

void DevicePagedKv::append(const float* k, const float* v, int n_new) {
  Impl& m = *impl_;
  if (n_new <= 0) return append_device(nullptr, nullptr, n_new);
  const size_t bytes = static_cast<size_t>(n_new) * m.shape.n_kv_heads * m.shape.head_dim * sizeof(float);
  m.staging_k.resize(bytes);
  m.staging_v.resize(bytes);
  check(gpuMemcpy(m.staging_k.ptr, k, bytes, gpuMemcpyHostToDevice), "upload keys");
  check(gpuMemcpy(m.staging_v.ptr, v, bytes, gpuMemcpyHostToDevice), "upload values");
  append_device(m.staging_k.as<float>(), m.staging_v.as<float>(), n_new);
  check(gpuDeviceSynchronize(), "append");
}

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

namespace {
bool same_matrix(const std::shared_ptr<const std::vector<float>>& a, const std::shared_ptr<const std::vector<float>>& b) {
  return a == b || (a && b && *a == *b);
}
bool same_tq(const std::optional<TqConstants>& ac, const std::optional<TqConstants>& bc) {
  if (ac.has_value() != bc.has_value()) return false;
  if (!ac) return true;
  const TqParams* a = &ac->params;
  const TqParams* b = &bc->params;
  return same_matrix(ac->sketch, bc->sketch) && same_matrix(ac->rotation_matrix, bc->rotation_matrix) &&
         a->qjl_scale == b->qjl_scale && a->bits == b->bits && a->outliers == b->outliers &&
         a->norm_correction == b->norm_correction && a->rotation_scale == b->rotation_scale &&
         std::memcmp(a->signs, b->signs, sizeof a->signs) == 0 &&
         std::memcmp(a->centroids, b->centroids, sizeof a->centroids) == 0 &&
         std::memcmp(a->thresholds, b->thresholds, sizeof a->thresholds) == 0 &&
         std::memcmp(a->outlier_centroids, b->outlier_centroids, sizeof a->outlier_centroids) == 0 &&
         std::memcmp(a->outlier_thresholds, b->outlier_thresholds, sizeof a->outlier_thresholds) == 0;
}
bool same_rotation(const std::optional<RotationParams>& a, const std::optional<RotationParams>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->scale == b->scale && std::memcmp(a->signs, b->signs, sizeof a->signs) == 0);
}
}  // namespace

void DevicePagedKv::truncate(int n) {
  Impl& m = *impl_;
  if (n < 0 || n > m.length)
    throw_usage_error("GPU paged KV: cannot truncate " + std::to_string(m.length) + " tokens to " + std::to_string(n));
  m.length = n;
  // KIVI: the window holds every token's f16 row, so groups past the new boundary are simply
  // read from it again (the CPU cache rebuilds them from the dequantized group instead).
  for (SideStore* side : {&m.key, &m.value}) side->quantized = std::min(side->quantized, side->quantized_for(n));
}

void DevicePagedKv::copy_prefix_from(const DevicePagedKv& source, int n) {
  Impl& m = *impl_;
  const Impl& src = *source.impl_;
  const PagedKvShape &a = m.shape, &b = src.shape;
  auto same_side = [](const KvSideFormat& x, const KvSideFormat& y) {
    return x.format == y.format && x.scale == y.scale && same_tq(x.tq, y.tq) && x.group == y.group &&
           x.residual == y.residual && same_rotation(x.rotation, y.rotation);
  };
  if (a.head_dim != b.head_dim || a.n_kv_heads != b.n_kv_heads || a.page_tokens != b.page_tokens ||
      !same_side(a.key, b.key) || !same_side(a.value, b.value))
    throw_usage_error("GPU paged KV: copy between caches of different shapes or formats");
  if (n < 0 || n > src.length || n > m.capacity)
    throw_usage_error("GPU paged KV: cannot copy " + std::to_string(n) + " tokens from a cache of " +
                      std::to_string(src.length) + " into one of capacity " + std::to_string(m.capacity));
  // Whole pages, one copy per page (a run of consecutive pool pages when both orders agree).
  const int pages = (n + a.page_tokens - 1) / a.page_tokens;
  for (int i = 0; i < pages;) {
    int run = 1;
    while (i + run < pages && m.order[i + run] == m.order[i] + run && src.order[i + run] == src.order[i] + run) ++run;
    for (const auto& [dst, from] : {std::pair{&m.key, &src.key}, std::pair{&m.value, &src.value}}) {
      const size_t page_bytes = static_cast<size_t>(a.n_kv_heads) * (a.page_tokens / dst->group) * dst->unit_bytes;
      check(gpuMemcpy(dst->pool.as<uint8_t>() + static_cast<size_t>(m.order[i]) * page_bytes,
                      from->pool.as<uint8_t>() + static_cast<size_t>(src.order[i]) * page_bytes, run * page_bytes,
                      gpuMemcpyDeviceToDevice),
            "copy pages");
    }
    i += run;
  }
  for (const auto& [dst, from] : {std::pair{&m.key, &src.key}, std::pair{&m.value, &src.value}}) {
    if (!dst->windowed) continue;
    check(gpuMemcpy(dst->window.ptr, from->window.ptr,
                    static_cast<size_t>(n) * a.n_kv_heads * a.head_dim * sizeof(uint16_t), gpuMemcpyDeviceToDevice),
          "copy window");
    dst->quantized = std::min(from->quantized, dst->quantized_for(n));
  }
  m.length = n;
}

std::vector<uint8_t> DevicePagedKv::key_row(int token, int kv_head) const {
  return impl_->download_unit(impl_->key, token, kv_head);
}

std::vector<uint8_t> DevicePagedKv::value_row(int token, int kv_head) const {
  return impl_->download_unit(impl_->value, token, kv_head);
}

namespace {
// Mean milliseconds per call of `launch` over `iterations`, after one warm-up call.
template <class Fn>
double time_ms(int iterations, Fn&& launch) {
  launch();
  check(gpuDeviceSynchronize(), "warm-up");
  gpuEvent_t start, stop;
  check(gpuEventCreate(&start), "event");
  check(gpuEventCreate(&stop), "event");
  check(gpuEventRecord(start, 0), "event record");
  for (int i = 0; i < iterations; ++i) launch();
  check(gpuEventRecord(stop, 0), "event record");
  check(gpuEventSynchronize(stop), "event sync");
  float ms = 0.0f;
  check(gpuEventElapsedTime(&ms, start, stop), "event time");
  (void)gpuEventDestroy(start);
  (void)gpuEventDestroy(stop);
  return static_cast<double>(ms) / std::max(iterations, 1);
}
}  // namespace

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

double DevicePagedKv::time_append_ms(const float* k, const float* v, int n_new, int iterations) {
  return time_ms(iterations, [&] {
    truncate(0);
    append_device(k, v, n_new);
  });
}

double device_copy_gbps(size_t bytes, int iterations) {
  DeviceBuffer src(bytes), dst(bytes);
  check(gpuMemset(src.ptr, 1, bytes), "memset");
  const double ms = time_ms(iterations, [&] { check(gpuMemcpy(dst.ptr, src.ptr, bytes, gpuMemcpyDeviceToDevice), "copy"); });
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

}  // namespace kvgate::kernels::gpu
