// Host code only (no GPU toolchain): the tile decode kernel's launch plan, attention_plan.h.
#include "kernels/gpu/attention_plan.h"

#include <algorithm>

namespace kvgate::kernels::gpu {

int occupancy_blocks_per_sm(const SmLimits& sm, int threads, int registers_per_thread, int shared_bytes) {
  const int warps = (threads + 31) / 32;
  const int by_threads = sm.threads / (warps * 32);
  const int per_warp = (registers_per_thread * 32 + sm.register_unit - 1) / sm.register_unit * sm.register_unit;
  const int by_registers = per_warp > 0 ? sm.registers / (per_warp * warps) : sm.blocks;
  const int by_shared = sm.shared_bytes / (shared_bytes + sm.shared_reserved_per_block);
  return std::max(0, std::min({sm.blocks, by_threads, by_registers, by_shared}));
}

namespace {

// The grid of `block_rows`-row blocks over every KV head and sequence, with splits of
// `split_tokens` tokens, or when 0, of split(want): `want` the splits that give two waves.
template <class Split>
TilePlan plan_tiles(int tokens, int n_kv_heads, int rows_per_kv_head, int n_seqs, int sms, int blocks_per_sm,
                    int block_rows, int split_tokens, Split split) {
  TilePlan p;
  p.row_blocks = (rows_per_kv_head + block_rows - 1) / block_rows;
  const int base = std::max(1, n_kv_heads * p.row_blocks * n_seqs);
  const int wave = std::max(1, sms * std::max(1, blocks_per_sm));
  p.split_tokens = split_tokens > 0 ? split_tokens : split(std::max(1, (2 * wave + base - 1) / base));
  p.splits = std::max(1, (tokens + p.split_tokens - 1) / p.split_tokens);
  p.blocks = p.splits * base;
  p.waves = static_cast<double>(p.blocks) / wave;
  return p;
}

}  // namespace

TilePlan plan_tile_decode(int tokens, int n_kv_heads, int rows_per_kv_head, int n_seqs, int sms, int blocks_per_sm,
                          int split_tokens) {
  return plan_tiles(tokens, n_kv_heads, rows_per_kv_head, n_seqs, sms, blocks_per_sm, kTileRows, split_tokens,
                    [&](int want) {
                      // Splits of whole tiles; rounding the split down only adds splits, so the two
                      // waves hold whenever the cache has that many tiles.
                      const int splits = std::min(want, std::max(1, (tokens + kTileTokens - 1) / kTileTokens));
                      return std::max(kTileTokens, tokens / splits / kTileTokens * kTileTokens);
                    });
}

TilePlan plan_tile_prefill(int tokens, int n_kv_heads, int rows_per_kv_head, int n_seqs, int sms, int blocks_per_sm,
                           int tile_tokens, int split_tokens) {
  return plan_tiles(tokens, n_kv_heads, rows_per_kv_head, n_seqs, sms, blocks_per_sm, kPrefillRows, split_tokens,
                    [&](int want) {
                      // No split shorter than kPrefillMinSplitTiles tiles; rounded down to whole tiles
                      // as for decode, but one split takes every token.
                      const int splits = std::min(want, std::max(1, tokens / (kPrefillMinSplitTiles * tile_tokens)));
                      return splits == 1 ? (tokens + tile_tokens - 1) / tile_tokens * tile_tokens
                                         : std::max(tile_tokens, tokens / splits / tile_tokens * tile_tokens);
                    });
}

ReadCount count_tile_reads(const TilePlan& plan, int tokens, int n_kv_heads, int page_tokens, int row_bytes,
                           const std::vector<int32_t>& page_table) {
  ReadCount c;
  c.per_byte.assign(page_table.size() * n_kv_heads * page_tokens * static_cast<size_t>(row_bytes), 0);
  for (int h = 0; h < n_kv_heads; ++h)
    for (int rb = 0; rb < plan.row_blocks; ++rb)
      for (int s = 0; s < plan.splits; ++s) {
        const int begin = s * plan.split_tokens, end = std::min(tokens, begin + plan.split_tokens);
        for_each_tile(begin, end, [&](int t0, int t_end) {
          tile_runs(page_table.data(), n_kv_heads, page_tokens, row_bytes, h, t0, t_end, [&](const TileRun& run) {
            for (int b = 0; b < run.bytes; ++b) ++c.per_byte[run.src + b];
            c.beyond_rows += static_cast<size_t>(run.bytes - std::min(run.bytes, run.rows * row_bytes));
          });
        });
      }
  return c;
}

}  // namespace kvgate::kernels::gpu
