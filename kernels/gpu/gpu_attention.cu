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
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "kernels/gpu/attention_common.cuh"
#include "kernels/gpu/attention_plan.h"

namespace kvgate::kernels::gpu {
namespace {

constexpr int kWarps = 4;  // warps per attention block
constexpr int kAttentionThreads = kWarp * kWarps;

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
  // rot=qr's dense Q goes through acc_s, free until the warps merge.
  load_query_rows(p, q_s, acc_s, kRows, n_rows, row0, kv_head);
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
  store_block_states(block, &warp_m[0][0], &warp_l[0][0]);  // the warps' states were last read above
  write_block_rows(p, acc_s, &warp_m[0][0], &warp_l[0][0], n_rows, row0, kv_head, split);
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

// The splits' partials folded in split order into the output (nothing to do for one split).
void merge_splits(int head_dim, int n_splits, size_t out_rows, const float* partial, float* out) {
  if (n_splits <= 1) return;
  merge_splits_kernel<<<static_cast<unsigned>(out_rows), 128>>>(head_dim, n_splits, out_rows, partial, out);
  check(gpuGetLastError(), "attention merge launch");
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

// KVGATE_GPU_ATTENTION=general runs this file's kernel for every call, the tile kernels for none:
// until a device run has confirmed the tile kernels, the way back to the kernel they replace.
bool general_attention_only() {
  static const bool general = [] {
    const char* v = std::getenv("KVGATE_GPU_ATTENTION");
    if (!v || !*v || std::strcmp(v, "tile") == 0) return false;
    if (std::strcmp(v, "general") == 0) return true;
    throw_usage_error(std::string("KVGATE_GPU_ATTENTION: expected 'tile' (the default) or 'general', got '") + v + "'");
  }();
  return general;
}

// Resident blocks per SM of a tile kernel at this shared memory, asked of the driver once.
int tile_blocks_per_sm(const TileKernel& kernel, int shared_bytes) {
  static std::mutex mutex;
  static std::map<std::pair<const TileKernel*, int>, int> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(&kernel, shared_bytes);
  auto it = known.find(key);
  if (it == known.end()) it = known.emplace(key, kernel.blocks_per_sm(shared_bytes)).first;
  return it->second;
}

}  // namespace

namespace {

// Each family's two lookups (attention_<family>[_prefill].cu), in KernelFamily's order: a new
// family is one row here beside its translation units.
using FindTileKernel = const TileKernel* (*)(FormatId key, FormatId value, int head_dim);
struct FamilyTileKernels {
  KernelFamily family;
  FindTileKernel decode, prefill;
};
constexpr FamilyTileKernels kFamilyTileKernels[] = {
    {KernelFamily::float16, find_decode_kernel_float16, find_prefill_kernel_float16},
    {KernelFamily::fp8, find_decode_kernel_fp8, find_prefill_kernel_fp8},
    {KernelFamily::per_token_head, find_decode_kernel_per_token_head, find_prefill_kernel_per_token_head},
    {KernelFamily::ggml, find_decode_kernel_ggml, find_prefill_kernel_ggml},
    {KernelFamily::nvfp4, find_decode_kernel_nvfp4, find_prefill_kernel_nvfp4},
    {KernelFamily::turboquant, find_decode_kernel_turboquant, find_prefill_kernel_turboquant},
};
constexpr bool rows_in_family_order() {
  for (size_t i = 0; i < std::size(kFamilyTileKernels); ++i)
    if (static_cast<size_t>(kFamilyTileKernels[i].family) != i) return false;
  return true;
}
static_assert(rows_in_family_order() && std::size(kFamilyTileKernels) == static_cast<size_t>(KernelFamily::turboquant) + 1,
              "one row per KernelFamily, in its order");

}  // namespace

const TileKernel* find_tile_kernel(KernelKinds kind, FormatId key, FormatId value, int head_dim) {
  if (!has_kernel(kind, key, value, head_dim)) return nullptr;
  const FamilyTileKernels& row = kFamilyTileKernels[static_cast<size_t>(kernel_family(key))];
  return (kind == kDecodeKernel ? row.decode : row.prefill)(key, value, head_dim);
}

namespace {

// The tile kernels' kind for a call: decode for up to kTileMaxRowsPerKvHead rows per KV head,
// prefill past that.
KernelKinds tile_kind(int rows_per_kv_head) { return rows_per_kv_head > kTileMaxRowsPerKvHead ? kPrefillKernel : kDecodeKernel; }

// The tile kernel for this call, or null when the general kernel serves it: a pair or head_dim
// without a kernel of the call's kind (kv_tile.h), pages that are not a multiple of 16 tokens, or
// KVGATE_GPU_ATTENTION=general.
const TileKernel* tile_kernel_for(const PagedKvShape& s, int rows_per_kv_head) {
  if (general_attention_only() || s.page_tokens % 16 != 0) return nullptr;
  return find_tile_kernel(tile_kind(rows_per_kv_head), s.key.format, s.value.format, s.head_dim);
}

}  // namespace

const char* DevicePagedKv::attention_kernel(int n_heads, int n_queries) const {
  const Impl& m = *impl_;
  const PagedKvShape& s = m.shape;
  if (s.arithmetic != Arithmetic::exact && !kv_arithmetic(s, n_queries).exact()) return "arithmetic";
  const int rows = n_heads / std::max(1, s.n_kv_heads) * n_queries;
  if (!tile_kernel_for(s, rows)) return "general";
  return tile_kind(rows) == kPrefillKernel ? "tile-prefill" : "tile-decode";
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
  // An engine whose kernel rounds something takes its own path (gpu_attention_arithmetic.cu), as
  // on the CPU; exact arithmetic stays on this one.
  if (s.arithmetic != Arithmetic::exact) {
    const AttentionArithmetic arithmetic = kv_arithmetic(s, n_queries);
    if (!arithmetic.exact()) return m.arithmetic_attention(arithmetic, n_heads, q, n_queries, softmax_scale, out);
  }
  AttentionParams p{};
  p.keys = m.rows(m.key);
  p.key_row_bytes = static_cast<int>(m.key.unit_bytes);
  p.value_row_bytes = static_cast<int>(m.value.unit_bytes);
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
  p.out = out;
  const size_t out_rows = static_cast<size_t>(n_queries) * n_heads;
  if (const TileKernel* tile = tile_kernel_for(s, n_queries * p.group)) {
    const int rows = n_queries * p.group;
    const bool prefill = tile_kind(rows) == kPrefillKernel;
    const int shared = tile->shared_bytes(p.key_row_bytes, p.value_row_bytes);
    const int per_sm = tile_blocks_per_sm(*tile, shared);
    const TilePlan plan =
        prefill ? plan_tile_prefill(m.length, s.n_kv_heads, rows, 1, multiprocessor_count(), per_sm, kPrefillTokens,
                                    split_tokens)
                : plan_tile_decode(m.length, s.n_kv_heads, rows, 1, multiprocessor_count(), per_sm, split_tokens);
    p.split_tokens = plan.split_tokens;
    p.n_splits = plan.splits;
    if (p.n_splits > 1) {
      m.partial.resize(static_cast<size_t>(p.n_splits) * out_rows * (s.head_dim + 2) * sizeof(float));
      p.partial = m.partial.as<float>();
    }
    tile->launch(p, dim3(plan.splits, s.n_kv_heads, plan.row_blocks), shared);
    check(gpuGetLastError(), "tile attention launch");
    return merge_splits(s.head_dim, p.n_splits, out_rows, p.partial, out);
  }
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
  merge_splits(s.head_dim, p.n_splits, out_rows, p.partial, out);
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
