#pragma once
// The tensor-core prefill kernel: FlashAttention-2-style tiles on mma.sync for the many query rows
// of a prefill chunk or a scoring pass against the paged cache, with the KV format as a
// compile-time tile loader (kv_tile.h), instantiated per key/value pair and head_dim by the family
// translation units (attention_<family>.cu). GPU sources only.
//
// A block of 4 warps serves 64 query rows (query position x GQA head, kPrefillRows) of one KV
// head and one split of its tokens; each warp owns 16 rows. Per tile of kPrefillTokens tokens:
//   - the tile's raw K and V bytes arrive in shared memory (16-byte cp.async on CUDA, issued while
//     the previous tile is computed; decoded straight from global memory on HIP);
//   - the block decodes them once, through the format's loader, into f16 tiles (K row-major, V
//     transposed; prefill_tile.h): every value an f16 rounding of the CPU codec's value;
//   - each warp computes its 16 rows' scores S = Q K^T on tensor cores, 32 tokens at a time (Q
//     split into f16 hi + lo terms once per block, in registers; keys too unless their values
//     are f16 values: prefill_tile.h's precision note; f32 accumulation), masks what its rows may
//     not see, updates their online softmax in registers (scores in log2 units: the query carries
//     log2 e), rounds P to f16 and accumulates O += P V on tensor cores.
// A warp skips the 32 tokens none of its rows can see (causal tile skipping), and a block stops at
// the last token its rows can see. Rows are independent and every sum runs in a fixed order, so
// results are bit-identical run to run; they depend on the split plan (attention_plan.h).
//
// Values beyond f16's range (|x| > 65504) would become infinite in the f16 tiles and the output
// non-finite (never a finite wrong value); KV caches do not hold such values in practice.
#include <atomic>
#include <utility>

#include "kernels/gpu/attention_common.cuh"
#include "kernels/gpu/attention_plan.h"
#include "kernels/gpu/gpu_async.h"
#include "kernels/gpu/tile_block.h"
#include "kernels/gpu/gpu_mma.h"
#include "kernels/gpu/prefill_tile.h"

namespace kvgate::kernels::gpu {

// 2^x: the hardware's approximation (relative error about 2^-22, far below the f16 terms);
// exp2f's exact path elsewhere.
__device__ __forceinline__ float fast_exp2(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

template <class KT, class VT, int D>
__global__ void __launch_bounds__(kPrefillThreads, prefill_min_blocks(!kF16ExactKeys<KT>))
    tile_prefill_kernel(AttentionParams p) {
  static_assert(D % 16 == 0 && D <= kMaxKvHeadDim, "head_dim: a multiple of 16 (one mma k-step)");
  constexpr int BC = kPrefillTokens, R = kPrefillRows;
  constexpr int KK = D / 16;                      // k-steps of S = Q K^T
  constexpr int NC = BC / 16;                     // chunks of 16 tokens per tile
  constexpr int SC = kPrefillSubTokens / 16;      // chunks per sub-tile
  constexpr int NJ = D / 8;                       // output tiles of 8 head_dim elements
  constexpr bool kSplit = !kF16ExactKeys<KT>;     // keys as hi + lo terms
  extern __shared__ __align__(16) uint8_t smem[];
  const PrefillSmem L = prefill_smem(D, p.key_row_bytes, p.value_row_bytes, kSplit);
  float (*rows_s)[D] = reinterpret_cast<float (*)[D]>(smem + L.rows);
  float (*scratch)[D] = reinterpret_cast<float (*)[D]>(smem + L.key_hi);
  uint16_t* ks = reinterpret_cast<uint16_t*>(smem + L.key_hi);
  uint16_t* ks_lo = reinterpret_cast<uint16_t*>(smem + L.key_lo);
  uint16_t* vt = reinterpret_cast<uint16_t*>(smem + L.value_tile);

  const int split = blockIdx.x, kv_head = blockIdx.y;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const BlockSpan span = block_span(p.n_queries, p.group, p.n_tokens, p.split_tokens, R, split, blockIdx.z);
  const int row0 = span.row0, n_rows = span.n_rows, first_pos = span.first_pos;
  const int split_begin = span.split_begin, split_end = span.split_end;

  // The query rows, scaled (by softmax_scale x log2 e: the launcher's) and rotated into the keys'
  // basis once per block, then this warp's as f16 operands in registers.
  load_query_rows(p, rows_s, scratch, R, n_rows, row0, kv_head);
  const int warp_row = kPrefillWarpRows * warp;
  uint32_t q_hi[KK][4], q_lo[KK][4];
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) query_frags(&rows_s[0][0], D, warp_row, lane, kk, q_hi[kk], q_lo[kk]);
  __syncthreads();  // the rows are read: on CUDA the staged bytes overwrite them

  // This lane's rows (g and g + 8 of the warp's): their positions, -1 for rows past n_rows.
  int pos[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp_row + mma_c_row(lane, 2 * i);
    pos[i] = r < n_rows ? first_pos + (row0 + r) / p.group : -1;
  }
  const int warp_last = min(warp_row + kPrefillWarpRows, n_rows) - 1;  // rows ascend: so do positions
  const int warp_max_pos = warp_last >= warp_row ? first_pos + (row0 + warp_last) / p.group : -1;
  const int warp_min_pos = warp_last >= warp_row ? first_pos + (row0 + warp_row) / p.group : -1;
  const bool warp_full = warp_row + kPrefillWarpRows <= n_rows;

  float o[NJ][4];
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[j][i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's part of the row sums

  const RowArgs key_args{D, p.kf.scale, p.kf.tq, nullptr, 0};
  const RowArgs value_args{D, p.vf.scale, p.vf.tq, nullptr, 0};
  const int key_stride = tile_row_stride(p.key_row_bytes), value_stride = tile_row_stride(p.value_row_bytes);
  uint8_t* stage = smem + L.stage;
  auto issue = [&](int t0) {
    if constexpr (kPrefillStaged) {
      const int t_end = min(t0 + BC, split_end);
      issue_tile_copies(p.keys, p.key_row_bytes, kv_head, t0, t_end, stage);
      issue_tile_copies(p.values, p.value_row_bytes, kv_head, t0, t_end, stage + L.stage_value);
      copy_commit();
    }
  };
  if (split_begin < split_end) issue(split_begin);

  for (int t0 = split_begin; t0 < split_end; t0 += BC) {
    const int n_tok = min(BC, split_end - t0);
    copy_wait<0>();
    __syncthreads();  // the tile's bytes are visible; every warp is done with the previous f16 tiles
    if constexpr (kPrefillStaged) {
      decode_prefill_tile<KT, VT, D, kSplit>(
          key_args, value_args, [&](int tok) { return stage + tok * key_stride; },
          [&](int tok) { return stage + L.stage_value + tok * value_stride; }, n_tok, ks, ks_lo, vt, threadIdx.x,
          kPrefillThreads);
    } else {
      decode_prefill_tile<KT, VT, D, kSplit>(
          key_args, value_args, [&](int tok) { return p.keys.unit(t0 + tok, kv_head); },
          [&](int tok) { return p.values.unit(t0 + tok, kv_head); }, n_tok, ks, ks_lo, vt, threadIdx.x,
          kPrefillThreads);
    }
    __syncthreads();  // the f16 tiles are complete, and the staged bytes consumed
    if (t0 + BC < split_end) issue(t0 + BC);
#pragma unroll 1
    for (int c0 = 0; c0 < NC; c0 += SC) {
      const int u0 = t0 + 16 * c0;  // the sub-tile's first token
      if (u0 > warp_max_pos || u0 >= split_end) break;  // none of this warp's rows sees the rest

      // S = Q K^T: chunk c, half h holds the scores of tokens 16c + 4t + 2h + (0, 1) of rows g, g + 8.
      float s[SC][2][4];
#pragma unroll
      for (int c = 0; c < SC; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int i = 0; i < 4; ++i) s[c][h][i] = 0.0f;
#pragma unroll
          for (int kk = 0; kk < KK; ++kk) {
            uint32_t b[2];
            load_operand(ks, key_operand(D, lane, c0 + c, h, kk), b);
            mma_f16_16816(s[c][h], q_lo[kk], b);
            if constexpr (kSplit) {
              uint32_t b_lo[2];
              load_operand(ks_lo, key_operand(D, lane, c0 + c, h, kk), b_lo);
              mma_f16_16816(s[c][h], q_hi[kk], b_lo);
            }
            mma_f16_16816(s[c][h], q_hi[kk], b);
          }
        }
      // Masking only where a token may be out of sight: past the split, after a row's position.
      if (!warp_full || u0 + kPrefillSubTokens > split_end || u0 + kPrefillSubTokens - 1 > warp_min_pos)
        mask_sub_tile(s, lane, u0, pos, split_end);
      // The online softmax of rows g and g + 8; the row's 4 lanes agree on its max.
#pragma unroll
      for (int ri = 0; ri < 2; ++ri) {
        float mx = lane_row_max(s, ri);
        mx = fmaxf(mx, gpu_shfl_xor(mx, 1));
        mx = fmaxf(mx, gpu_shfl_xor(mx, 2));
        softmax_sub_tile(s, o, m[ri], l[ri], ri, mx, [](float x) { return fast_exp2(x); });
      }
      // O += P V, P rounded to f16 straight from the score registers.
#pragma unroll
      for (int c = 0; c < SC; ++c) {
        uint32_t pf[4];
        score_frag(s[c][0], s[c][1], pf);
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          uint32_t b[2];
          load_operand(vt, value_operand(BC, lane, c0 + c, j), b);
          mma_f16_16816(o[j], pf, b);
        }
      }
    }
  }

  // The rows' sums over their 4 lanes (a fixed order), then the output rows through shared memory:
  // the rotation back (values stored rotated) and the write of the output or the split's partial
  // are attention_common.cuh's, as for the decode kernels. States go out in natural-log units.
  __syncthreads();  // every warp is done with the tiles (the states' place) and no copy is in flight
  float* row_max = reinterpret_cast<float*>(smem + L.key_hi);
  float* row_denom = row_max + R;
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    l[ri] += gpu_shfl_xor(l[ri], 1);
    l[ri] += gpu_shfl_xor(l[ri], 2);
    const int r = warp_row + mma_c_row(lane, 2 * ri);
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      rows_s[r][8 * j + mma_c_col(lane, 0)] = o[j][2 * ri];
      rows_s[r][8 * j + mma_c_col(lane, 1)] = o[j][2 * ri + 1];
    }
    if (lane % 4 == 0) {
      row_max[r] = m[ri] == -INFINITY ? -INFINITY : m[ri] * 0.693147180559945309f;
      row_denom[r] = l[ri];
    }
  }
  __syncthreads();
  write_block_rows(p, rows_s, row_max, row_denom, n_rows, row0, kv_head, split);
}

template <class KT, class VT, int D>
void launch_tile_prefill(const AttentionParams& p, dim3 grid, int shared_bytes) {
  static std::atomic<int> allowed{48 * 1024};
  allow_dynamic_shared(&tile_prefill_kernel<KT, VT, D>, shared_bytes, allowed, "tile prefill shared memory");
  AttentionParams log2_units = p;
  log2_units.softmax_scale = p.softmax_scale * 1.4426950408889634f;  // exp(x) = exp2(x log2 e)
  tile_prefill_kernel<KT, VT, D><<<grid, kPrefillThreads, shared_bytes>>>(log2_units);
}

template <class KT, class VT, int D>
int tile_prefill_blocks_per_sm(int shared_bytes) {
  return resident_blocks_per_sm(&tile_prefill_kernel<KT, VT, D>, kPrefillThreads, shared_bytes, "tile prefill occupancy");
}

}  // namespace kvgate::kernels::gpu
