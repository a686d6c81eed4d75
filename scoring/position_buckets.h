#pragma once
// Quality by position in the context (issue 32): KV quantization fails at long context while
// the first thousands of tokens stay near-lossless, so a mean over every position hides it. Each
// scored token falls into one bucket by its absolute position in the item's token sequence (the
// number of tokens before it): 0-1k, 1-2k, 2-4k, ..., 64-128k, and 128k+ for anything longer.
// Per bucket the sums of KLD, Δp and same-top-1 over its tokens are kept (sums, so buckets add
// up exactly over turns, items and runs); a curve is their token-weighted means per bucket.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvgate::scoring {

// Bucket b holds positions [kPositionBucketStart[b], kPositionBucketStart[b + 1]); the last is
// open-ended.
inline constexpr std::array<int64_t, 9> kPositionBucketStart = {0, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
inline constexpr int kPositionBuckets = static_cast<int>(kPositionBucketStart.size());

// The bucket of a 0-based position (negative positions are a caller's bug: bucket 0).
int position_bucket(int64_t position);
// "0-1k", "1-2k", ..., "64-128k", "128k+".
std::string position_bucket_name(int bucket);
// The bucket that starts at `position`; nullopt when no bucket starts there.
std::optional<int> position_bucket_starting_at(int64_t position);
// The bucket's end (exclusive); nullopt for the last, open-ended one.
std::optional<int64_t> position_bucket_end(int bucket);

struct PositionSums {
  int64_t tokens = 0;
  double kld_sum = 0, delta_p_sum = 0;
  int64_t same_top1 = 0;

  void add(double kld, double delta_p, bool same) {
    ++tokens;
    kld_sum += kld;
    delta_p_sum += delta_p;
    same_top1 += same ? 1 : 0;
  }
  void add(const PositionSums& o) {
    tokens += o.tokens;
    kld_sum += o.kld_sum;
    delta_p_sum += o.delta_p_sum;
    same_top1 += o.same_top1;
  }
  // Token-weighted means; NaN without tokens.
  double kld_mean() const;
  double delta_p_mean() const;
  double same_top1_rate() const;
};

// One bucket of one stored unit (an item's turn, or an item) under one config.
struct PositionRow {
  std::string item_key;
  std::string config;
  int bucket = 0;
  PositionSums sums;
};

// One point of a config's curve: a bucket with its tokens, the items that had tokens there, and
// the token-weighted means.
struct PositionPoint {
  int bucket = 0;
  int64_t tokens = 0, items = 0;
  double kld_mean = 0, delta_p_mean = 0, same_top1 = 0;
};

// Per config (in first-seen order of `rows`), the buckets that hold tokens, in bucket order.
// Rows are summed in the order given: callers pass them in the store's order (item key, config,
// turn), so every consumer of the same rows gets the same bits.
struct PositionCurve {
  std::string config;  // the canonical spec rows are keyed by
  std::string label;   // what tables show (the config as typed, results' label); empty: the spec
  const std::string& shown() const { return label.empty() ? config : label; }
  std::vector<PositionPoint> points;
};
std::vector<PositionCurve> position_curves(std::span<const PositionRow> rows);

}  // namespace kvgate::scoring
