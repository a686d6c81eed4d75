#include "scoring/position_buckets.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace kvgate::scoring {
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string kilo(int64_t v) { return std::to_string(v / 1024) + (v == 0 ? "" : "k"); }
}  // namespace

int position_bucket(int64_t position) {
  // upper_bound: the first start above the position; the bucket is the one before it.
  const auto it = std::upper_bound(kPositionBucketStart.begin(), kPositionBucketStart.end(), position);
  return it == kPositionBucketStart.begin() ? 0 : static_cast<int>(it - kPositionBucketStart.begin()) - 1;
}

std::string position_bucket_name(int bucket) {
  const int64_t from = kPositionBucketStart[static_cast<size_t>(bucket)];
  const std::optional<int64_t> to = position_bucket_end(bucket);
  if (!to) return kilo(from) + "+";
  // "0-1k", not "0k-1k"; the lower end takes the upper's unit.
  return (from == 0 ? std::string("0") : std::to_string(from / 1024)) + "-" + kilo(*to);
}

std::optional<int> position_bucket_starting_at(int64_t position) {
  for (int b = 0; b < kPositionBuckets; ++b)
    if (kPositionBucketStart[static_cast<size_t>(b)] == position) return b;
  return std::nullopt;
}

std::optional<int64_t> position_bucket_end(int bucket) {
  if (bucket + 1 >= kPositionBuckets) return std::nullopt;
  return kPositionBucketStart[static_cast<size_t>(bucket) + 1];
}

double PositionSums::kld_mean() const { return tokens > 0 ? kld_sum / static_cast<double>(tokens) : kNaN; }
double PositionSums::delta_p_mean() const { return tokens > 0 ? delta_p_sum / static_cast<double>(tokens) : kNaN; }
double PositionSums::same_top1_rate() const {
  return tokens > 0 ? static_cast<double>(same_top1) / static_cast<double>(tokens) : kNaN;
}

std::vector<PositionCurve> position_curves(std::span<const PositionRow> rows) {
  std::vector<std::string> order;
  std::map<std::string, std::map<int, PositionSums>> sums;
  std::map<std::string, std::map<int, std::set<std::string>>> items;
  for (const PositionRow& r : rows) {
    if (!sums.count(r.config)) order.push_back(r.config);
    sums[r.config][r.bucket].add(r.sums);
    if (r.sums.tokens > 0) items[r.config][r.bucket].insert(r.item_key);
  }
  std::vector<PositionCurve> out;
  for (const std::string& config : order) {
    PositionCurve c{config, {}};
    for (const auto& [bucket, s] : sums[config]) {
      if (s.tokens == 0) continue;
      c.points.push_back({bucket, s.tokens, static_cast<int64_t>(items[config][bucket].size()), s.kld_mean(),
                          s.delta_p_mean(), s.same_top1_rate()});
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace kvgate::scoring
