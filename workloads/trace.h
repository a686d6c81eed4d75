#pragma once
// Shape traces: token counts, arrival times and prefix-block hashes, with no text. Every
// importer turns its source format into the same Trace, which the profile and the capacity
// simulator consume.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::workloads {

enum class TraceFormat { automatic, mooncake, azure, burstgpt, bailian, kvgate };
enum class BadRowPolicy { abort, skip };

struct TraceRequest {
  double arrival_s = 0.0;  // relative to the trace's first request after loading
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  // One id per block of Trace::block_tokens prompt tokens, in prompt order. Ids are compared
  // as a chain: block i is reusable only when blocks 0..i all match an earlier prompt's.
  std::vector<uint64_t> block_ids;
  int64_t session = -1;  // dense session index, -1 when the format has no sessions
  int32_t turn = 0;      // 1-based turn within the session, 0 when unknown
};

struct Trace {
  std::string source;  // file name, for messages
  TraceFormat format = TraceFormat::automatic;
  int block_tokens = 0;  // tokens per block id; 0 when the format carries no block ids
  bool has_sessions = false;
  std::vector<TraceRequest> requests;  // sorted by arrival (stable, so ties keep file order)
  uint64_t rows_read = 0;
  uint64_t bad_rows_skipped = 0;
  std::string first_bad_row;  // "FILE:LINE: problem" of the first skipped row, empty if none
};

std::string_view format_name(TraceFormat format);
// Accepts the names `auto`, `mooncake`, `azure`, `burstgpt`, `bailian`, `kvgate`; anything
// else is a usage error listing them.
TraceFormat parse_format_name(std::string_view name);

// Reads and validates a whole trace. Each malformed row names FILE:LINE and the problem: with
// BadRowPolicy::abort it throws an input error, with skip it is counted in bad_rows_skipped.
Trace load_trace(const std::string& path, TraceFormat format = TraceFormat::automatic,
                 BadRowPolicy bad_rows = BadRowPolicy::abort);
// The same on text already in memory; `name` stands for the file in messages.
Trace parse_trace(std::string_view text, const std::string& name, TraceFormat format = TraceFormat::automatic,
                  BadRowPolicy bad_rows = BadRowPolicy::abort);

// kvgate's own shape format, one JSON object per line:
//   {"session": "s3", "turn": 2, "timestamp_ms": 1500.0, "input_tokens": 9000,
//    "output_tokens": 300, "block_tokens": 16, "hash_ids": [..ceil(input/block) ids..]}
// session and turn are optional; hash_ids and block_tokens go together.
void write_kvgate_trace(const Trace& trace, std::ostream& out);

// Block i of a request's prompt covers tokens [i*block, min((i+1)*block, input)).
inline int64_t block_token_count(const TraceRequest& r, int block_tokens, size_t i) {
  const int64_t start = static_cast<int64_t>(i) * block_tokens;
  const int64_t left = r.input_tokens - start;
  return left < block_tokens ? (left > 0 ? left : 0) : block_tokens;
}

// The chain key of block i: a hash of the block's id and every id before it, so equal keys
// mean equal prefixes even in formats whose ids name only one block's content.
uint64_t chain_block_key(uint64_t previous_key, uint64_t block_id);

}  // namespace kvgate::workloads
