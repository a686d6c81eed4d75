#include "harness/report/position_report.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "harness/report/stored_scores.h"

namespace kvgate::harness {
namespace {

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

std::string cell(double v, const char* format) { return std::isfinite(v) ? fmt::format(fmt::runtime(format), v) : "-"; }

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

std::string positions_text(const std::vector<scoring::PositionCurve>& curves) {
  if (curves.empty()) return "";
  size_t width = 24;
  for (const scoring::PositionCurve& c : curves) width = std::max(width, c.shown().size());
  std::string text = fmt::format("by position (scored tokens by their absolute position in the context; against the "
                                 "reference)\n  {:<{}} {:>9} {:>8} {:>6} {:>11} {:>11} {:>8}\n",
                                 "config", width, "positions", "tokens", "items", "mean KLD", "mean Δp", "top-1 %");
  for (const scoring::PositionCurve& c : curves)
    for (size_t i = 0; i < c.points.size(); ++i) {
      const scoring::PositionPoint& p = c.points[i];
      text += fmt::format("  {:<{}} {:>9} {:>8} {:>6} {:>11} {:>11} {:>8}\n", i == 0 ? c.shown() : "", width,
                          scoring::position_bucket_name(p.bucket), p.tokens, p.items, cell(p.kld_mean, "{:.6f}"),
                          cell(p.delta_p_mean, "{:+.5f}"), cell(100 * p.same_top1, "{:.2f}"));
    }
  return text;
}

nlohmann::json positions_json(const std::vector<scoring::PositionCurve>& curves) {
  nlohmann::json out = nlohmann::json::array();
  for (const scoring::PositionCurve& c : curves) {
    nlohmann::json buckets = nlohmann::json::array();
    for (const scoring::PositionPoint& p : c.points) {
      const std::optional<int64_t> to = scoring::position_bucket_end(p.bucket);
      buckets.push_back({{"bucket", scoring::position_bucket_name(p.bucket)},
                         {"position_from", scoring::kPositionBucketStart[static_cast<size_t>(p.bucket)]},
                         {"position_to", to ? nlohmann::json(*to) : nlohmann::json(nullptr)},
                         {"scored_tokens", p.tokens},
                         {"items", p.items},
                         {"kld_mean", number_or_null(p.kld_mean)},
                         {"delta_p_mean", number_or_null(p.delta_p_mean)},
                         {"same_top1", number_or_null(p.same_top1)}});
    }
    out.push_back({{"spec", c.config}, {"label", c.shown()}, {"buckets", buckets}});
  }
  return out;
}

std::string positions_markdown(const std::vector<scoring::PositionCurve>& curves) {
  if (curves.empty()) return "";
  std::set<int> buckets;
  for (const scoring::PositionCurve& c : curves)
    for (const scoring::PositionPoint& p : c.points) buckets.insert(p.bucket);
  std::string md = "\n**By position** (mean KLD of the scored tokens in each range of absolute positions; top-1 "
                   "agreement in brackets)\n\n| positions |";
  for (const scoring::PositionCurve& c : curves) md += " " + c.shown() + " |";
  md += "\n|---|";
  for (size_t k = 0; k < curves.size(); ++k) md += "---:|";
  md += "\n";
  for (const int b : buckets) {
    md += "| " + scoring::position_bucket_name(b) + " |";
    for (const scoring::PositionCurve& c : curves) {
      const auto it = std::find_if(c.points.begin(), c.points.end(), [b](const scoring::PositionPoint& p) { return p.bucket == b; });
      md += it == c.points.end() ? " - |"
                                 : fmt::format(" {} ({}) |", cell(it->kld_mean, "{:.4g}"), cell(100 * it->same_top1, "{:.1f}%"));
    }
    md += "\n";
  }
  return md;
}

}  // namespace kvgate::harness
