#include "harness/report/position_report.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "harness/stored_scores.h"
#include "harness/report/verdicts.h"
#include "scoring/metrics.h"

namespace kvgate::harness {
namespace {

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

std::string cell(double v, const char* format) { return std::isfinite(v) ? fmt::format(fmt::runtime(format), v) : "-"; }

// "[0.0101, 0.0150]" in `format`, or "-" without an interval.
std::string interval(const scoring::Estimate& e, const char* format) {
  if (!std::isfinite(e.low) || !std::isfinite(e.high)) return "-";
  return "[" + fmt::format(fmt::runtime(format), e.low) + ", " + fmt::format(fmt::runtime(format), e.high) + "]";
}

nlohmann::json estimate_json(const scoring::Estimate& e) {
  return {{"value", number_or_null(e.value)}, {"low", number_or_null(e.low)}, {"high", number_or_null(e.high)}};
}

int percent_of(double confidence) { return static_cast<int>(std::lround(confidence * 100)); }

// "1.57x [1.31x, 1.90x] (12)": a bucket's mean KLD against the shallowest on the items holding
// both; "-" at the shallowest itself.
std::string ratio_cell(const scoring::DepthEffect& e) {
  if (e.documents == 0) return "-";
  std::string s = std::isfinite(e.kld_ratio.value) ? fmt::format("{:.3g}x", e.kld_ratio.value) : "-";
  if (std::isfinite(e.kld_ratio.low)) s += fmt::format(" [{:.3g}x, {:.3g}x]", e.kld_ratio.low, e.kld_ratio.high);
  return s + fmt::format(" ({})", e.documents);
}

nlohmann::json effect_json(const scoring::DepthEffect& e) {
  return {{"shallow", scoring::position_bucket_name(e.shallow)},
          {"deep", scoring::position_bucket_name(e.deep)},
          {"documents", e.documents},
          {"shallow_tokens", e.shallow_tokens},
          {"deep_tokens", e.deep_tokens},
          {"shallow_kld_mean", number_or_null(e.shallow_kld)},
          {"deep_kld_mean", number_or_null(e.deep_kld)},
          {"kld_ratio", estimate_json(e.kld_ratio)},
          {"kld_difference", estimate_json(e.kld_difference)},
          {"shallow_same_top1", number_or_null(e.shallow_top1)},
          {"deep_same_top1", number_or_null(e.deep_top1)},
          {"same_top1_difference", estimate_json(e.top1_difference)}};
}

const scoring::DepthPoint* depth_point(const scoring::DepthCurve& d, int bucket) {
  for (const scoring::DepthPoint& p : d.points)
    if (p.bucket == bucket) return &p;
  return nullptr;
}

}  // namespace

std::vector<scoring::PositionCurve> run_position_curves(const results::StoredRun& run) {
  const std::vector<scoring::PositionRow> rows = position_rows(run);
  std::vector<scoring::PositionCurve> curves = scoring::position_curves(rows);
  std::vector<scoring::PositionCurve> out;
  for (const results::RunConfigRecord& c : run.configs) {
    if (c.role == results::ConfigRole::reference) continue;
    for (scoring::PositionCurve& curve : curves)
      if (curve.config == c.spec && !curve.points.empty()) {
        curve.label = c.label;
        out.push_back(std::move(curve));
      }
  }
  return out;
}

bool PositionView::has_depth() const {
  for (const scoring::PositionCurve& c : curves)
    if (c.points.size() > 1) return true;
  return false;
}

scoring::BootstrapSettings positions_bootstrap() { return load_policy_or_default("").bootstrap; }

PositionView run_positions(const results::StoredRun& run, const scoring::BootstrapSettings& bootstrap) {
  PositionView v;
  v.bootstrap = bootstrap;
  v.curves = run_position_curves(run);
  const std::vector<scoring::PositionRow> rows = position_rows(run);
  for (const scoring::PositionCurve& c : v.curves)
    v.depth.push_back(scoring::depth_curve(scoring::config_documents(rows, c.config), c.config, bootstrap));
  return v;
}

std::string depth_effect_line(const std::string& label, const std::optional<scoring::DepthEffect>& effect,
                              const scoring::BootstrapSettings& bootstrap) {
  if (!effect)
    return fmt::format("{}: no depth effect (no bucket past the shallowest holds {} items that also hold the shallowest)",
                       label, scoring::kDepthMinDocuments);
  const scoring::DepthEffect& e = *effect;
  const std::string deep = scoring::position_bucket_name(e.deep), shallow = scoring::position_bucket_name(e.shallow);
  std::string s = label + ": mean KLD at " + deep;
  if (std::isfinite(e.kld_ratio.value))
    s += fmt::format(" is {:.3g}x its {} value on the same {} documents ({}% CI [{:.3g}x, {:.3g}x]; {:+.4g} nats [{:+.4g}, "
                     "{:+.4g}])",
                     e.kld_ratio.value, shallow, e.documents, percent_of(bootstrap.confidence), e.kld_ratio.low,
                     e.kld_ratio.high, e.kld_difference.value, e.kld_difference.low, e.kld_difference.high);
  else
    s += fmt::format(" minus its {} value on the same {} documents: {:+.4g} nats ({}% CI [{:+.4g}, {:+.4g}])", shallow,
                     e.documents, e.kld_difference.value, percent_of(bootstrap.confidence), e.kld_difference.low,
                     e.kld_difference.high);
  s += fmt::format("; top-1 agreement {:+.2f} points [{:+.2f}, {:+.2f}]", 100 * e.top1_difference.value,
                   100 * e.top1_difference.low, 100 * e.top1_difference.high);
  return s;
}

std::string positions_text(const PositionView& view) {
  if (view.empty()) return "";
  size_t width = 24;
  for (const scoring::PositionCurve& c : view.curves) width = std::max(width, c.shown().size());
  const int pct = percent_of(view.bootstrap.confidence);
  std::string text = fmt::format(
      "by position (scored tokens by their absolute position in the context; against the reference; {}% intervals "
      "from a bootstrap over the items, i.e. documents, holding each bucket)\n  {:<{}} {:>9} {:>6} {:>8} {:>11} {:>22} "
      "{:>11} {:>12}  {}\n",
      pct, "config", width, "positions", "items", "tokens", "mean KLD", fmt::format("{}% CI", pct), "mean Δp",
      scoring::metric_heading(scoring::metric_info(scoring::Metric::same_top1), true),
      "KLD vs the shallowest bucket, same items");
  for (size_t k = 0; k < view.curves.size(); ++k) {
    const scoring::PositionCurve& c = view.curves[k];
    for (size_t i = 0; i < c.points.size(); ++i) {
      const scoring::PositionPoint& p = c.points[i];
      const scoring::DepthPoint* d = depth_point(view.depth[k], p.bucket);
      text += fmt::format("  {:<{}} {:>9} {:>6} {:>8} {:>11} {:>22} {:>11} {:>12}  {}\n", i == 0 ? c.shown() : "", width,
                          scoring::position_bucket_name(p.bucket), p.items, p.tokens, cell(p.kld_mean, "{:.6f}"),
                          d ? interval(d->estimate.kld_mean, "{:.6f}") : "-", cell(p.delta_p_mean, "{:+.5f}"),
                          cell(100 * p.same_top1, "{:.2f}"), d ? ratio_cell(d->vs_shallow) : "-");
    }
  }
  if (!view.has_depth()) return text;
  text += "depth effect (the deepest bucket that at least " + std::to_string(scoring::kDepthMinDocuments) +
          " items share with the shallowest, paired on those items):\n";
  for (size_t k = 0; k < view.curves.size(); ++k)
    text += "  " + depth_effect_line(view.curves[k].shown(), view.depth[k].effect, view.bootstrap) + "\n";
  return text;
}

nlohmann::json positions_json(const PositionView& view) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t k = 0; k < view.curves.size(); ++k) {
    const scoring::PositionCurve& c = view.curves[k];
    nlohmann::json buckets = nlohmann::json::array();
    for (const scoring::PositionPoint& p : c.points) {
      const std::optional<int64_t> to = scoring::position_bucket_end(p.bucket);
      const scoring::DepthPoint* d = depth_point(view.depth[k], p.bucket);
      nlohmann::json b = {{"bucket", scoring::position_bucket_name(p.bucket)},
                          {"position_from", scoring::kPositionBucketStart[static_cast<size_t>(p.bucket)]},
                          {"position_to", to ? nlohmann::json(*to) : nlohmann::json(nullptr)},
                          {"scored_tokens", p.tokens},
                          {"items", p.items},
                          {"kld_mean", number_or_null(p.kld_mean)},
                          {"delta_p_mean", number_or_null(p.delta_p_mean)},
                          {"same_top1", number_or_null(p.same_top1)},
                          {"kld_mean_ci", nullptr},
                          {"same_top1_ci", nullptr},
                          {"vs_shallowest", nullptr}};
      if (d && std::isfinite(d->estimate.kld_mean.low)) {
        b["kld_mean_ci"] = {d->estimate.kld_mean.low, d->estimate.kld_mean.high};
        b["same_top1_ci"] = {number_or_null(d->estimate.same_top1.low), number_or_null(d->estimate.same_top1.high)};
      }
      if (d && d->vs_shallow.documents > 0) b["vs_shallowest"] = effect_json(d->vs_shallow);
      buckets.push_back(std::move(b));
    }
    const std::optional<scoring::DepthEffect>& e = view.depth[k].effect;
    out.push_back({{"spec", c.config},
                   {"label", c.shown()},
                   {"buckets", buckets},
                   {"depth_effect", e ? effect_json(*e) : nlohmann::json(nullptr)}});
  }
  return out;
}

std::string positions_markdown(const PositionView& view) {
  if (view.empty()) return "";
  std::set<int> buckets;
  for (const scoring::PositionCurve& c : view.curves)
    for (const scoring::PositionPoint& p : c.points) buckets.insert(p.bucket);
  const int pct = percent_of(view.bootstrap.confidence);
  std::string md = fmt::format(
      "\n**By position** (mean KLD of the scored tokens in each range of absolute positions, its {}% interval over the "
      "items (documents) there, top-1 agreement; items / tokens)\n\n| positions |",
      pct);
  for (const scoring::PositionCurve& c : view.curves) md += " " + c.shown() + " |";
  md += "\n|---|";
  for (size_t k = 0; k < view.curves.size(); ++k) md += "---:|";
  md += "\n";
  for (const int b : buckets) {
    md += "| " + scoring::position_bucket_name(b) + " |";
    for (size_t k = 0; k < view.curves.size(); ++k) {
      const scoring::PositionCurve& c = view.curves[k];
      const auto it = std::find_if(c.points.begin(), c.points.end(), [b](const scoring::PositionPoint& p) { return p.bucket == b; });
      if (it == c.points.end()) {
        md += " - |";
        continue;
      }
      const scoring::DepthPoint* d = depth_point(view.depth[k], b);
      const std::string ci = d ? interval(d->estimate.kld_mean, "{:.4g}") : "-";
      md += fmt::format(" {}{} ({}; {} / {}) |", cell(it->kld_mean, "{:.4g}"), ci == "-" ? "" : " " + ci,
                        cell(100 * it->same_top1, "{:.1f}%"), it->items, it->tokens);
    }
    md += "\n";
  }
  if (!view.has_depth()) return md;
  md += "\nDepth effect (the deepest bucket that at least " + std::to_string(scoring::kDepthMinDocuments) +
        " items share with the shallowest, paired on those items):\n\n";
  for (size_t k = 0; k < view.curves.size(); ++k)
    md += "- " + depth_effect_line(view.curves[k].shown(), view.depth[k].effect, view.bootstrap) + "\n";
  return md;
}

}  // namespace kvgate::harness
