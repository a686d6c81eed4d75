#pragma once
// The launch plan of the tile decode kernel (attention_tile.cuh), as host code any compiler
// builds: its shared-memory layout, the occupancy formula that turns registers and shared memory
// into resident blocks per SM, how a sequence is split so the grid fills the device, and the
// walk of every block's tiles, which the kernel and the byte-count check below share (so the
// check counts the copies the kernel issues, not a model of them). tests/kernels/attention_plan_test.cc
// holds the plan to its promises without a GPU.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/gpu/kv_tile.h"
#include "kernels/gpu/prefill_tile.h"

namespace kvgate::kernels::gpu {

inline constexpr int kTileWarps = 4;                     // warps per tile-decode block
inline constexpr int kTileThreads = 32 * kTileWarps;     // 128
inline constexpr int kTileRows = 4;                      // query rows (position x GQA head) per block
inline constexpr int kTileMaxRegisters = 64;
// Decode steps (up to 8 query positions of a GQA group of 4) take the tile decode kernel, in row
// blocks of kTileRows; a prefill chunk's more rows take the tensor-core prefill kernel
// (prefill_tile.h, row blocks of kPrefillRows).
inline constexpr int kTileMaxRowsPerKvHead = 32;
// Tokens each warp scores per tile: the tile's 32 tokens over 4 warps.
inline constexpr int kWarpTokens = kTileTokens / kTileWarps;
#if defined(__HIP_PLATFORM_AMD__) || defined(KVGATE_GPU_HIP)
inline constexpr int kTileStages = 1;  // HIP copies synchronously: a second buffer would only cost LDS
#else
inline constexpr int kTileStages = 2;  // tile i + 1 is in flight while tile i is computed
#endif

// The dynamic shared memory of one block, in bytes from its start (every offset a multiple of 16).
struct TileSmem {
  int q, acc, weights, warp_state, stages, stage_bytes, key_tile, total;
};
KVGATE_HD TileSmem tile_smem(int head_dim, int key_row_bytes, int value_row_bytes) {
  TileSmem s{};
  const int rows_bytes = kTileRows * head_dim * 4;  // [kTileRows][head_dim] floats
  s.q = 0;
  s.acc = s.q + rows_bytes;
  s.weights = s.acc + rows_bytes;                                  // [warps][rows][warp tokens] floats
  s.warp_state = s.weights + kTileWarps * kTileRows * kWarpTokens * 4;  // [2][warps][rows] floats
  s.stages = s.warp_state + 2 * kTileWarps * kTileRows * 4;
  s.key_tile = tile_bytes(key_row_bytes);
  s.stage_bytes = s.key_tile + tile_bytes(value_row_bytes);
  s.total = s.stages + kTileStages * s.stage_bytes;
  return s;
}

// What one SM offers (NVIDIA's occupancy calculator's inputs); the defaults are Hopper's (H100/H200).
struct SmLimits {
  int registers = 65536;
  int register_unit = 256;            // registers are allocated per warp in units of 256
  int shared_bytes = 233472;          // 228 KiB usable by blocks
  int shared_reserved_per_block = 1024;
  int threads = 2048;
  int blocks = 32;
};
// Resident blocks per SM: the least of what threads, registers and shared memory allow.
int occupancy_blocks_per_sm(const SmLimits& sm, int threads, int registers_per_thread, int shared_bytes);

// The grid of one tile-kernel call (decode or prefill).
struct TilePlan {
  int row_blocks = 0;    // blocks over one KV head's query rows (kTileRows or kPrefillRows each)
  int splits = 0;        // per sequence and KV head
  int split_tokens = 0;  // a multiple of the kernel's tile
  int blocks = 0;        // the grid: splits x KV heads x row blocks x sequences
  double waves = 0.0;    // blocks / (SMs x blocks per SM)
};
// Splits so the grid covers at least two waves of the device (each SM runs blocks_per_sm at
// once), with splits of whole tiles; a split_tokens the caller fixed (a multiple of 32) is kept.
TilePlan plan_tile_decode(int tokens, int n_kv_heads, int rows_per_kv_head, int n_seqs, int sms, int blocks_per_sm,
                            int split_tokens = 0);

// The prefill kernel's (prefill_tile.h): row blocks of kPrefillRows, and splits of whole tiles of
// `tile_tokens` (the kernel's kPrefillTokens), at least kPrefillMinSplitTiles each, so the grid
// covers two waves where the cache is long enough; a split_tokens the caller fixed (a multiple of
// 32) is kept.
inline constexpr int kPrefillMinSplitTiles = 4;
TilePlan plan_tile_prefill(int tokens, int n_kv_heads, int rows_per_kv_head, int n_seqs, int sms, int blocks_per_sm,
                           int tile_tokens, int split_tokens = 0);

// The tiles of one split, in the order a block computes them: fn(t0, t_end) per tile.
template <class Fn>
KVGATE_HD void for_each_tile(int split_begin, int split_end, Fn&& fn) {
  for (int t0 = split_begin; t0 < split_end; t0 += kTileTokens) fn(t0, t0 + kTileTokens < split_end ? t0 + kTileTokens : split_end);
}

// How often each byte of one side's pool is copied by one decode step of the plan over a cache of
// `tokens` tokens: the kernel's own tile walk and copy schedule (for_each_tile, tile_runs), every
// split and row block of every KV head. `beyond_rows` counts the bytes copied past the last row a
// run asked for (its rounding up to whole 16-byte copies).
struct ReadCount {
  std::vector<uint16_t> per_byte;  // indexed like the pool
  size_t beyond_rows = 0;
};
ReadCount count_tile_reads(const TilePlan& plan, int tokens, int n_kv_heads, int page_tokens, int row_bytes,
                           const std::vector<int32_t>& page_table);

}  // namespace kvgate::kernels::gpu
