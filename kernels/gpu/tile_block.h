#pragma once
// The query rows and tokens one block of a tile attention kernel serves (the decode kernel,
// attention_tile.cuh, and the prefill kernel, attention_prefill.cuh; prefill_tile_test runs the
// prefill kernel's blocks on the host with it). Host+device code.
#include "core/host_device.h"

namespace kvgate::kernels::gpu {

// What one block of a tile kernel (decode or prefill) serves: query rows [row0, row0 + n_rows) of
// its KV head (position x GQA head, position-major), and tokens [split_begin, split_end), the
// split cut at the last token its rows can see (query q sits at position first_pos + q).
struct BlockSpan {
  int row0, n_rows, first_pos, split_begin, split_end;
};
KVGATE_HD BlockSpan block_span(int n_queries, int group, int n_tokens, int split_tokens, int block_rows, int split,
                               int row_block) {
  BlockSpan b;
  b.row0 = row_block * block_rows;
  const int rows_left = n_queries * group - b.row0;
  b.n_rows = rows_left < block_rows ? rows_left : block_rows;
  b.first_pos = n_tokens - n_queries;
  b.split_begin = split * split_tokens;
  const int last_seen = b.first_pos + (b.row0 + b.n_rows - 1) / group + 1;
  const int visible_end = n_tokens < last_seen ? n_tokens : last_seen;
  b.split_end = b.split_begin + split_tokens < visible_end ? b.split_begin + split_tokens : visible_end;
  return b;
}

}  // namespace kvgate::kernels::gpu
