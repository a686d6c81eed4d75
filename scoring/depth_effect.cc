#include "scoring/depth_effect.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <vector>

#include "core/hash.h"
#include "core/percentile.h"
#include "core/rng.h"

namespace kvgate::scoring {
namespace {

// The percentile interval of `stat` over `resamples` draws of n document indices with
// replacement. `stat` sums the drawn documents and returns the statistics (up to 3) in `out`;
// an interval whose resamples are not all finite is left NaN (a ratio over a zero denominator).
template <size_t K, typename Stat>
void bootstrap(size_t n, const BootstrapSettings& settings, uint64_t seed, Stat stat, std::array<Estimate*, K> into) {
  Rng rng(seed);
  std::vector<size_t> draw(n);
  std::array<std::vector<double>, K> values;
  for (auto& v : values) v.reserve(settings.resamples);
  std::array<double, K> out{};
  for (size_t r = 0; r < settings.resamples; ++r) {
    for (size_t& d : draw) d = static_cast<size_t>(rng.below(n));
    stat(draw, out);
    for (size_t k = 0; k < K; ++k) values[k].push_back(out[k]);
  }
  const double tail = (1 - settings.confidence) / 2;
  for (size_t k = 0; k < K; ++k) {
    if (into[k] == nullptr) continue;
    std::vector<double>& v = values[k];
    if (v.empty() || !std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); })) continue;
    std::sort(v.begin(), v.end());
    into[k]->low = percentile_sorted(v, tail);
    into[k]->high = percentile_sorted(v, 1 - tail);
  }
}

std::string fmt_key(const char* what, const std::string& config, int a, int b) {
  return std::string(what) + " " + config + " " + std::to_string(a) + " " + std::to_string(b);
}

double ratio(double numerator, double denominator) {
  return denominator != 0 ? numerator / denominator : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

ConfigDocuments config_documents(std::span<const PositionRow> rows, const std::string& config) {
  ConfigDocuments out;
  for (const PositionRow& r : rows)
    if (r.config == config && r.sums.tokens > 0) out[r.item_key][r.bucket].add(r.sums);
  return out;
}

uint64_t estimate_seed(const BootstrapSettings& settings, const std::string& what) {
  return settings.seed ^ xxhash64(what);
}

BucketEstimate bucket_estimate(const ConfigDocuments& docs, int bucket, const BootstrapSettings& settings, uint64_t seed) {
  std::vector<const PositionSums*> in;
  PositionSums total;
  for (const auto& [key, buckets] : docs)
    if (const auto it = buckets.find(bucket); it != buckets.end() && it->second.tokens > 0) {
      in.push_back(&it->second);
      total.add(it->second);
    }
  BucketEstimate e;
  e.documents = static_cast<int64_t>(in.size());
  e.tokens = total.tokens;
  e.kld_mean.value = total.kld_mean();
  e.same_top1.value = total.same_top1_rate();
  if (e.documents < kDepthMinDocuments) return e;
  bootstrap<2>(in.size(), settings, seed,
               [&](const std::vector<size_t>& draw, std::array<double, 2>& out) {
                 PositionSums s;
                 for (const size_t d : draw) s.add(*in[d]);
                 out = {s.kld_mean(), s.same_top1_rate()};
               },
               std::array<Estimate*, 2>{&e.kld_mean, &e.same_top1});
  return e;
}

DepthEffect depth_effect(const ConfigDocuments& docs, int shallow, int deep, const BootstrapSettings& settings,
                         uint64_t seed) {
  std::vector<std::pair<const PositionSums*, const PositionSums*>> pairs;
  PositionSums s_total, d_total;
  for (const auto& [key, buckets] : docs) {
    const auto s = buckets.find(shallow), d = buckets.find(deep);
    if (s == buckets.end() || d == buckets.end() || s->second.tokens == 0 || d->second.tokens == 0) continue;
    pairs.emplace_back(&s->second, &d->second);
    s_total.add(s->second);
    d_total.add(d->second);
  }
  DepthEffect e;
  e.shallow = shallow;
  e.deep = deep;
  e.documents = static_cast<int64_t>(pairs.size());
  e.shallow_tokens = s_total.tokens;
  e.deep_tokens = d_total.tokens;
  if (pairs.empty()) return e;
  e.shallow_kld = s_total.kld_mean();
  e.deep_kld = d_total.kld_mean();
  e.shallow_top1 = s_total.same_top1_rate();
  e.deep_top1 = d_total.same_top1_rate();
  e.kld_ratio.value = ratio(e.deep_kld, e.shallow_kld);
  e.kld_difference.value = e.deep_kld - e.shallow_kld;
  e.top1_difference.value = e.deep_top1 - e.shallow_top1;
  if (!e.measured()) return e;
  bootstrap<3>(pairs.size(), settings, seed,
               [&](const std::vector<size_t>& draw, std::array<double, 3>& out) {
                 PositionSums s, d;
                 for (const size_t i : draw) {
                   s.add(*pairs[i].first);
                   d.add(*pairs[i].second);
                 }
                 out = {ratio(d.kld_mean(), s.kld_mean()), d.kld_mean() - s.kld_mean(),
                        d.same_top1_rate() - s.same_top1_rate()};
               },
               std::array<Estimate*, 3>{std::isfinite(e.kld_ratio.value) ? &e.kld_ratio : nullptr, &e.kld_difference,
                                        &e.top1_difference});
  return e;
}

std::optional<int> deepest_paired_bucket(const ConfigDocuments& docs, int shallow) {
  std::map<int, int64_t> paired;  // deep bucket -> documents holding it and `shallow`
  for (const auto& [key, buckets] : docs) {
    const auto s = buckets.find(shallow);
    if (s == buckets.end() || s->second.tokens == 0) continue;
    for (const auto& [b, sums] : buckets)
      if (b > shallow && sums.tokens > 0) ++paired[b];
  }
  std::optional<int> out;
  for (const auto& [b, n] : paired)
    if (n >= kDepthMinDocuments) out = b;
  return out;
}

DepthCurve depth_curve(const ConfigDocuments& docs, const std::string& config, const BootstrapSettings& settings) {
  DepthCurve c;
  c.config = config;
  std::set<int> buckets;
  for (const auto& [key, doc] : docs)
    for (const auto& [b, sums] : doc)
      if (sums.tokens > 0) buckets.insert(b);
  if (buckets.empty()) return c;
  const int shallow = *buckets.begin();
  auto effect = [&](int deep) {
    return depth_effect(docs, shallow, deep, settings,
                        estimate_seed(settings, fmt_key("depth", config, shallow, deep)));
  };
  for (const int b : buckets) {
    DepthPoint p;
    p.bucket = b;
    p.estimate = bucket_estimate(docs, b, settings, estimate_seed(settings, fmt_key("bucket", config, b, b)));
    if (b != shallow) p.vs_shallow = effect(b);
    c.points.push_back(std::move(p));
  }
  if (const std::optional<int> deep = deepest_paired_bucket(docs, shallow))
    for (const DepthPoint& p : c.points)
      if (p.bucket == *deep) c.effect = p.vs_shallow;
  return c;
}

}  // namespace kvgate::scoring
