#pragma once
// The tile decode kernel: flash-decoding with the KV format as a compile-time tile loader
// (kv_tile.h), instantiated per key/value pair and head_dim by one translation unit per family
// (attention_<family>.cu, through attention_kernels.cuh). GPU sources only.
//
// A block of 128 threads serves one split of one KV head's sequence and kTileRows query rows
// (query position x GQA head), so each K/V byte it loads feeds every query head of the group.
// Per tile of 32 tokens:
//   - the tile's K and V bytes are copied into shared memory with 16-byte copies, asynchronously
//     on CUDA, one tile ahead of the compute (attention_plan.h kTileStages); the copy knows only
//     the row size, never the format;
//   - scores: warp w takes tokens 8w..8w+7, lane (token lane % 8, quarter lane / 8) decodes its
//     quarter of the key row 4 elements at a time into registers and dots it with every row's
//     query (shared memory, rotated and scaled once per block); two shuffles sum the quarters;
//   - each warp updates its rows' online softmax (kernels/softmax_state.h) over its 8 tokens;
//   - values: each lane decodes its head_dim / 32 elements of each of the warp's tokens and
//     accumulates them for every row.
// Warps are merged in warp order, then the output rotated back once per block, then the splits
// are merged in split order (gpu_attention.cu), so results are bit-identical run to run; they
// depend on the split plan (attention_plan.h, fixed per shape and device).
#include <atomic>

#include "kernels/gpu/attention_common.cuh"
#include "kernels/gpu/attention_plan.h"
#include "kernels/gpu/gpu_async.h"
#include "kernels/gpu/tile_block.h"
#include "kernels/gpu/kv_tile.h"

namespace kvgate::kernels::gpu {

template <class KT, class VT, int D>
__global__ void __launch_bounds__(kTileThreads, 8) tile_decode_kernel(AttentionParams p) {
  static_assert(D % 32 == 0 && D <= kMaxKvHeadDim, "head_dim: a multiple of 32 (8 elements per lane quarter)");
  constexpr int R = kTileRows;
  constexpr int kValue = D / 32;  // value elements per lane
  constexpr int kQuarter = D / 4;  // key elements per lane in the score loop
  // Key elements decoded at a time: with the 4 rows' query elements they take 5 x kKeyRun
  // registers; 2 (4 at head_dim 256) keeps the kernel within 64 registers without spills.
  constexpr int kKeyRun = D >= 256 ? 4 : 2;
  extern __shared__ __align__(16) uint8_t smem[];
  const TileSmem L = tile_smem(D, p.key_row_bytes, p.value_row_bytes);
  float (*q_s)[D] = reinterpret_cast<float (*)[D]>(smem + L.q);
  float (*acc_s)[D] = reinterpret_cast<float (*)[D]>(smem + L.acc);
  float (*p_s)[R][kWarpTokens] = reinterpret_cast<float (*)[R][kWarpTokens]>(smem + L.weights);
  float* warp_m = reinterpret_cast<float*>(smem + L.warp_state);
  float* warp_l = warp_m + kTileWarps * R;
  uint8_t* stages = smem + L.stages;

  const int split = blockIdx.x, kv_head = blockIdx.y;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const BlockSpan span = block_span(p.n_queries, p.group, p.n_tokens, p.split_tokens, R, split, blockIdx.z);
  const int row0 = span.row0, n_rows = span.n_rows, first_pos = span.first_pos;
  const int split_begin = span.split_begin, split_end = span.split_end;

  auto issue = [&](int t0, int stage) {
    uint8_t* k_dst = stages + stage * L.stage_bytes;
    const int t_end = min(t0 + kTileTokens, split_end);
    issue_tile_copies(p.keys, p.key_row_bytes, kv_head, t0, t_end, k_dst);
    issue_tile_copies(p.values, p.value_row_bytes, kv_head, t0, t_end, k_dst + L.key_tile);
    copy_commit();
  };
  // The first tile's bytes move while the query is loaded and rotated.
  if (split_begin < split_end) issue(split_begin, 0);

  load_query_rows(p, q_s, acc_s, R, n_rows, row0, kv_head);

  const RowArgs key_args{D, p.kf.scale, p.kf.tq, nullptr, 0};
  const RowArgs value_args{D, p.vf.scale, p.vf.tq, nullptr, 0};
  const int key_stride = tile_row_stride(p.key_row_bytes), value_stride = tile_row_stride(p.value_row_bytes);
  const int tok = lane % kWarpTokens, quarter = lane / kWarpTokens;

  SoftmaxState state[R];  // this warp's, per row
  float acc[R][kValue];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int e = 0; e < kValue; ++e) acc[r][e] = 0.0f;

  int stage = 0;
  for (int t0 = split_begin; t0 < split_end; t0 += kTileTokens) {
    if constexpr (kTileStages > 1) {
      if (t0 + kTileTokens < split_end) issue(t0 + kTileTokens, stage ^ 1);
      else copy_commit();  // an empty group keeps the wait below counting tiles
      copy_wait<1>();
    }
    __syncthreads();
    const uint8_t* k_tile = stages + stage * L.stage_bytes;
    const uint8_t* v_tile = k_tile + L.key_tile;
    const int warp_t0 = t0 + warp * kWarpTokens;

    // Scores of the warp's 8 tokens: each lane a quarter of one key row.
    const int t = warp_t0 + tok;
    float s[R];
#pragma unroll
    for (int r = 0; r < R; ++r) s[r] = 0.0f;
    const uint8_t* k_row = k_tile + (warp * kWarpTokens + tok) * key_stride;
#pragma unroll
    for (int i = 0; i < kQuarter; i += kKeyRun) {
      const int i0 = quarter * kQuarter + i;
      float k[kKeyRun];
      KT::template decode<kKeyRun>(key_args, k_row, i0, k);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int e = 0; e < kKeyRun; ++e) s[r] = fmaf(q_s[r][i0 + e], k[e], s[r]);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      s[r] += gpu_shfl_xor(s[r], 8);
      s[r] += gpu_shfl_xor(s[r], 16);
      // A token past the split or after the row's position scores -inf, whatever its (possibly
      // never copied) bytes decoded to.
      // (Row r sits at position first_pos + (row0 + r) / group; rows past n_rows see nothing.)
      const bool seen = t < split_end && r < n_rows && t <= first_pos + (row0 + r) / p.group;
      const float score = seen ? s[r] : -INFINITY;
      float m = score;
      for (int o = 1; o < kWarpTokens; o *= 2) m = fmaxf(m, gpu_shfl_xor(m, o));
      const float correction = state[r].raise_max(m);
      const float w = state[r].weight(score);
      float sum = w;
      for (int o = 1; o < kWarpTokens; o *= 2) sum += gpu_shfl_xor(sum, o);
      state[r].add(sum);
#pragma unroll
      for (int e = 0; e < kValue; ++e) acc[r][e] *= correction;
      if (quarter == 0) p_s[warp][r][tok] = w;
    }
    gpu_syncwarp();

    // Values: lane l accumulates elements [l * kValue, (l + 1) * kValue) of each token.
    const int tile_n = min(kWarpTokens, split_end - warp_t0);
#pragma unroll 1
    for (int j = 0; j < tile_n; ++j) {
      float v[kValue];
      VT::template decode<kValue>(value_args, v_tile + (warp * kWarpTokens + j) * value_stride, lane * kValue, v);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float w = p_s[warp][r][j];
#pragma unroll
        for (int e = 0; e < kValue; ++e) acc[r][e] = fmaf(w, v[e], acc[r][e]);
      }
    }
    gpu_syncwarp();
    __syncthreads();  // every warp is done with this stage before it is refilled
    if constexpr (kTileStages == 1) {
      if (t0 + kTileTokens < split_end) issue(t0 + kTileTokens, 0);
    } else {
      stage ^= 1;
    }
  }

  // Merge the warps in warp order.
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      warp_m[warp * R + r] = state[r].max;
      warp_l[warp * R + r] = state[r].denom;
    }
  }
  __syncthreads();
  SoftmaxState block[R];
  float factor[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    block[r] = merge_in_order(kTileWarps, [&](int w) { return SoftmaxState{warp_m[w * R + r], warp_l[w * R + r]}; });
    factor[r] = state[r].merge_weight(block[r].max);
  }
  const int own = lane * kValue;
  for (int w = 0; w < kTileWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int e = 0; e < kValue; ++e) {
          const float mine = acc[r][e] * factor[r];
          acc_s[r][own + e] = w == 0 ? mine : acc_s[r][own + e] + mine;
        }
    }
    __syncthreads();
  }
  store_block_states(block, warp_m, warp_l);  // the warps' states were last read above
  write_block_rows(p, acc_s, warp_m, warp_l, n_rows, row0, kv_head, split);
}

template <class KT, class VT, int D>
void launch_tile_decode(const AttentionParams& p, dim3 grid, int shared_bytes) {
  static std::atomic<int> allowed{48 * 1024};  // head_dim 256 with f16 rows asks for more
  allow_dynamic_shared(&tile_decode_kernel<KT, VT, D>, shared_bytes, allowed, "tile attention shared memory");
  tile_decode_kernel<KT, VT, D><<<grid, kTileThreads, shared_bytes>>>(p);
}

template <class KT, class VT, int D>
int tile_decode_blocks_per_sm(int shared_bytes) {
  return resident_blocks_per_sm(&tile_decode_kernel<KT, VT, D>, kTileThreads, shared_bytes, "tile attention occupancy");
}

}  // namespace kvgate::kernels::gpu
