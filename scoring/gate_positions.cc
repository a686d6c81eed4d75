#include "scoring/gate_positions.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "scoring/depth_effect.h"

namespace kvgate::scoring {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using ItemConfig = std::pair<std::string, ConfigIndex>;  // (item_key, config)
using Buckets = std::map<int, PositionSums>;

// Per (item, config), its rows summed per bucket (the rows come per turn).
std::map<ItemConfig, Buckets> item_buckets(const GateRun& run) {
  std::map<ItemConfig, Buckets> out;
  for (const GatePosition& r : run.positions) out[{r.item_key, r.config}][r.bucket].add(r.sums);
  return out;
}

// The metric of a position check, which the policy reader took from the metric table.
const MetricInfo& bucket_metric(const std::string& name) {
  const MetricInfo* m = find_metric(name);
  if (!m || !m->of_bucket) throw_internal_error("position check on metric '" + name + "', which has no position rows");
  return *m;
}

double value_of(const PositionSums& s, const MetricInfo& metric) {
  const std::optional<BucketObservation> o = metric.of_bucket(s);
  return o ? o->sum / o->tokens : std::numeric_limits<double>::quiet_NaN();
}

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : "n/a"; }

// "16k+": positions from 16384 on.
std::string from_name(int64_t position) { return position == 0 ? "0+" : std::to_string(position / 1024) + "k+"; }

// "position.absolute.kld_mean@16-32k[long, q4_0/q4_0]"; `what` absolute | regression | "".
CheckResult make(const std::string& what, const std::string& metric, const std::string& domain, const GateConfig& config) {
  CheckResult c;
  c.kind = CheckKind::position;
  c.metric = metric;
  c.domain = domain;
  c.config = config.spec;
  c.config_id = config.id;
  c.name = std::string(check_kind_name(c.kind)) + "." + (what.empty() ? "" : what + ".") + metric + "[" + domain + ", " +
           config.spec + "]";
  c.baseline_value = c.candidate_value = c.delta = c.ci_low = c.ci_high = c.threshold = kNaN;
  return c;
}

// One group's items in one run, with their buckets (an item without position rows has none).
struct GroupRun {
  std::vector<std::pair<std::string, const Buckets*>> items;  // item-key order
  PositionSums in_bucket(int b) const {
    PositionSums s;
    for (const auto& [key, buckets] : items)
      if (const auto it = buckets->find(b); it != buckets->end()) s.add(it->second);
    return s;
  }
};

}  // namespace

void add_position_checks(const GatePolicy& policy, const GateRun* baseline, const ConfigMatch& match,
                         const GateRun& cand, std::vector<CheckResult>& out) {
  static const Buckets kNone;
  const std::map<ItemConfig, Buckets> cand_rows = item_buckets(cand);
  const std::map<ItemConfig, Buckets> base_rows = baseline ? item_buckets(*baseline) : std::map<ItemConfig, Buckets>{};
  // (domain, candidate config) -> its items in each run. A baseline config that no candidate
  // config matches has no group: the coverage checks say so.
  std::map<std::pair<std::string, ConfigIndex>, std::pair<GroupRun, GroupRun>, GroupOrder> groups(GroupOrder{&cand});
  std::map<ConfigIndex, ConfigIndex> cand_of_base;  // the baseline's matched configs
  for (ConfigIndex c = 0; c < match.baseline_of.size(); ++c)
    if (match.baseline_of[c]) cand_of_base[*match.baseline_of[c]] = c;
  auto add_items = [&](const GateRun& run, const std::map<ItemConfig, Buckets>& rows, bool is_cand) {
    for (const GateItem& it : run.items) {
      ConfigIndex config = it.config;
      if (!is_cand) {
        const auto c = cand_of_base.find(it.config);
        if (c == cand_of_base.end()) continue;
        config = c->second;
      }
      if (cand.is_reference(config)) continue;  // its KLD is against itself
      const auto r = rows.find({it.item_key, it.config});
      auto& g = groups[{it.domain, config}];
      (is_cand ? g.first : g.second).items.emplace_back(it.item_key, r == rows.end() ? &kNone : &r->second);
    }
  };
  add_items(cand, cand_rows, true);
  if (baseline) add_items(*baseline, base_rows, false);

  for (const auto& [key, runs] : groups) {
    const auto& [domain, config_index] = key;
    const GateConfig& config = cand.configs[config_index];
    const GroupRun &c_run = runs.first, &b_run = runs.second;
    if (c_run.items.empty()) continue;  // only the baseline has the domain: the coverage checks say so
    const GateLimits limits = policy.limits_for(domain, config.spec);
    if (!limits.positions) continue;
    for (const PositionLimit& pl : *limits.positions) {
      if (!pl.limit && !baseline) continue;  // a regression needs a baseline (evaluate_gate notes its absence)
      const int first = *position_bucket_starting_at(pl.min_position);
      const MetricInfo& info = bucket_metric(pl.metric);
      const bool upper = info.worse == Worse::higher;
      const double sign = upper ? 1.0 : -1.0;
      int last = -1;  // the last bucket from `first` on that either run reaches
      for (int b = first; b < kPositionBuckets; ++b)
        if (c_run.in_bucket(b).tokens > 0 || b_run.in_bucket(b).tokens > 0) last = b;
      if (last < 0) {
        CheckResult c = make("", pl.metric + "@" + from_name(pl.min_position), domain, config);
        c.passed = c.skipped = true;
        c.threshold = pl.limit.value_or(pl.regression.value_or(kNaN));
        c.items = c_run.items.size();
        c.detail = fmt::format("{} from position {} on: no scored token of {} reaches position {} in {}; not checked",
                               pl.metric, pl.min_position, domain, pl.min_position,
                               baseline ? "either run" : "the candidate run");
        out.push_back(std::move(c));
        continue;
      }
      for (int b = first; b <= last; ++b) {
        const std::string bucket = position_bucket_name(b);
        const std::string metric = pl.metric + "@" + bucket;
        const PositionSums cs = c_run.in_bucket(b), bs = b_run.in_bucket(b);
        if (pl.limit) {
          CheckResult c = make("absolute", metric, domain, config);
          c.threshold = *pl.limit;
          c.candidate_value = value_of(cs, info);
          c.baseline_value = value_of(bs, info);
          c.items = c_run.items.size();
          if (cs.tokens == 0) {
            c.passed = c.skipped = true;
            c.detail = fmt::format("{} at positions {}: the candidate has no scored token there ({} in the baseline); "
                                   "not checked",
                                   pl.metric, bucket, bs.tokens);
          } else {
            c.passed = upper ? c.candidate_value <= *pl.limit : c.candidate_value >= *pl.limit;
            c.detail = fmt::format("{} at positions {}: {} {} limit {} over {} tokens (baseline {})", pl.metric, bucket,
                                   num(c.candidate_value), c.passed ? (upper ? "<=" : ">=") : (upper ? ">" : "<"),
                                   num(*pl.limit), cs.tokens, num(c.baseline_value));
          }
          out.push_back(std::move(c));
        }
        if (!pl.regression || !baseline) continue;
        CheckResult c = make("regression", metric, domain, config);
        c.threshold = *pl.regression;
        std::map<std::string, const Buckets*> base_items(b_run.items.begin(), b_run.items.end());
        std::vector<double> bv, cv;
        std::vector<AffectedItem> moved;
        for (const auto& [item, buckets] : c_run.items) {
          const auto bi = base_items.find(item);
          if (bi == base_items.end()) continue;
          const auto x = bi->second->find(b), y = buckets->find(b);
          if (x == bi->second->end() || y == buckets->end() || x->second.tokens == 0 || y->second.tokens == 0) continue;
          const double xv = value_of(x->second, info), yv = value_of(y->second, info);
          bv.push_back(xv);
          cv.push_back(yv);
          moved.push_back({item, xv, yv, yv - xv});
        }
        c.items = bv.size();
        if (bv.empty()) {
          c.passed = c.skipped = true;
          c.detail = fmt::format("{} at positions {}: no item has scored tokens there in both runs (baseline {} tokens, "
                                 "candidate {}); not checked",
                                 pl.metric, bucket, bs.tokens, cs.tokens);
          out.push_back(std::move(c));
          continue;
        }
        const bool real = decide_paired_regression(c, bv, cv, std::move(moved), sign, *pl.regression, policy);
        const int pct = static_cast<int>(std::lround(policy.bootstrap.confidence * 100));
        c.detail = fmt::format("{} at positions {}: mean delta {:+.6g} ({}% CI [{:+.6g}, {:+.6g}], {} items; baseline {} -> "
                               "candidate {}): {}",
                               pl.metric, bucket, c.delta, pct, c.ci_low, c.ci_high, bv.size(), num(c.baseline_value),
                               num(c.candidate_value),
                               c.passed ? (real ? fmt::format("real but within the {} floor", num(*pl.regression))
                                                : std::string("interval includes no worsening"))
                                        : fmt::format("worse by more than the {} floor", num(*pl.regression)));
        out.push_back(std::move(c));
      }
    }
  }
}

void add_depth_checks(const GatePolicy& policy, const GateRun& cand, std::vector<CheckResult>& out) {
  const int pct = static_cast<int>(std::lround(policy.bootstrap.confidence * 100));
  for (ConfigIndex index = 0; index < cand.configs.size(); ++index) {
    if (cand.is_reference(index)) continue;  // its KLD is against itself
    const GateConfig& config = cand.configs[index];
    const GateLimits limits = policy.limits_for("*", config.spec);
    if (!limits.depth || limits.depth->empty()) continue;
    ConfigDocuments docs;  // the config's documents, as depth_effect.h's config_documents gathers them
    for (const GatePosition& r : cand.positions)
      if (r.config == index && r.sums.tokens > 0) docs[r.item_key][r.bucket].add(r.sums);
    int deepest = -1;  // the deepest bucket any document reaches
    for (const auto& [key, buckets] : docs)
      for (const auto& [b, sums] : buckets)
        if (sums.tokens > 0) deepest = std::max(deepest, b);
    for (const DepthLimit& dl : *limits.depth) {
      const int shallow = *position_bucket_starting_at(dl.shallow), first = *position_bucket_starting_at(dl.min_position);
      const bool kld = dl.metric == "kld_mean";
      const double threshold = dl.ratio_max.value_or(dl.floor.value_or(kNaN));
      if (deepest < first) {
        CheckResult c = make("depth", dl.metric + "@" + from_name(dl.min_position) + "/" + position_bucket_name(shallow),
                             "*", config);
        c.passed = c.skipped = true;
        c.threshold = threshold;
        c.items = docs.size();
        c.detail = fmt::format("{} from position {} on against {}: no scored token of the run reaches position {}; not "
                               "checked",
                               dl.metric, dl.min_position, position_bucket_name(shallow), dl.min_position);
        out.push_back(std::move(c));
        continue;
      }
      for (int b = first; b <= deepest; ++b) {
        const std::string pair = position_bucket_name(b) + " against " + position_bucket_name(shallow);
        CheckResult c = make("depth", dl.metric + "@" + position_bucket_name(b) + "/" + position_bucket_name(shallow),
                             "*", config);
        c.threshold = threshold;
        const DepthEffect e = depth_effect(docs, shallow, b, policy.bootstrap, estimate_seed(policy.bootstrap, c.name));
        c.items = static_cast<size_t>(e.documents);
        if (!e.measured()) {
          c.passed = c.skipped = true;
          c.detail = fmt::format("{} at {}: {} document{} hold{} scored tokens in both ({} needed for an interval over "
                                 "documents); not checked",
                                 dl.metric, pair, e.documents, e.documents == 1 ? "" : "s", e.documents == 1 ? "s" : "",
                                 kDepthMinDocuments);
          out.push_back(std::move(c));
          continue;
        }
        // The worsening with depth: more KLD, or less top-1 agreement, deep than shallow.
        const Estimate& diff = kld ? e.kld_difference : e.top1_difference;
        const double sign = kld ? 1.0 : -1.0;
        c.baseline_value = kld ? e.shallow_kld : e.shallow_top1;
        c.candidate_value = kld ? e.deep_kld : e.deep_top1;
        c.delta = diff.value;
        c.ci_low = diff.low;
        c.ci_high = diff.high;
        const bool real = kld ? diff.low > 0 : diff.high < 0;
        const bool over_ratio = !dl.ratio_max || (std::isfinite(e.kld_ratio.value) && e.kld_ratio.value > *dl.ratio_max);
        const bool over_floor = !dl.floor || sign * diff.value > *dl.floor;
        c.passed = !(real && over_ratio && over_floor);
        std::string limits_text;
        if (dl.ratio_max) limits_text += fmt::format("ratio limit {}x", num(*dl.ratio_max));
        if (dl.floor) limits_text += fmt::format("{}floor {}", limits_text.empty() ? "" : ", ", num(*dl.floor));
        c.detail = fmt::format("{} at {} on the same {} documents: {} -> {} ({:+.6g}, {}% CI [{:+.6g}, {:+.6g}]{}); {}",
                               dl.metric, pair, e.documents, num(c.baseline_value), num(c.candidate_value), diff.value, pct,
                               diff.low, diff.high,
                               kld ? fmt::format("; {}x [{}x, {}x]", num(e.kld_ratio.value), num(e.kld_ratio.low),
                                                 num(e.kld_ratio.high))
                                   : std::string(),
                               !real ? std::string("interval includes no worsening with depth")
                               : c.passed ? fmt::format("worse with depth, but within the {}", limits_text)
                                          : fmt::format("worse with depth beyond the {}", limits_text));
        out.push_back(std::move(c));
      }
    }
  }
}

}  // namespace kvgate::scoring
