#include "harness/report/depth_accuracy.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "evalsets/generate.h"

namespace kvgate::harness {
std::string depth_text(int depth_permille) { return fmt::format("{:.3g}", depth_permille / 1000.0); }

std::string depth_accuracy_cell(const DepthAccuracyRow& r, size_t c) {
  return r.answered[c] == 0 ? "-" : fmt::format("{}/{}", r.correct[c], r.answered[c]);
}

const scoring::GoldSignal& DepthAccuracy::signal_of(const std::string& domain) const {
  static const scoring::GoldSignal kNone;
  for (const auto& [d, s] : signal)
    if (d == domain) return s;
  return kNone;
}

DepthAccuracy run_depth_accuracy(const results::StoredRun& run) {
  DepthAccuracy out;
  std::map<int64_t, size_t> column;  // config id -> index
  for (const results::RunConfigRecord& c : run.configs) {
    column[c.config_id] = out.specs.size();
    out.specs.push_back(c.spec);
    out.labels.push_back(c.label.empty() ? c.spec : c.label);
  }
  const results::RunConfigRecord* ref = run.reference();
  std::map<std::pair<std::string, int>, DepthAccuracyRow> rows;
  std::map<std::string, std::pair<int64_t, int64_t>> reference;  // domain -> (correct, answered)
  for (const results::RunItemMetrics& r : run.items) {
    const std::optional<bool>& gold = r.metrics.exact_match_gold;
    if (!gold) continue;
    const std::optional<int> depth = evalsets::generated_depth_permille(r.item_key);
    const auto col = column.find(r.metrics.config_id);
    if (!depth || col == column.end()) continue;
    DepthAccuracyRow& row = rows[{r.domain, *depth}];
    if (row.answered.empty()) {
      row.domain = r.domain;
      row.depth_permille = *depth;
      row.correct.assign(out.specs.size(), 0);
      row.answered.assign(out.specs.size(), 0);
    }
    ++row.answered[col->second];
    row.correct[col->second] += *gold ? 1 : 0;
    if (ref && r.metrics.config_id == ref->config_id) {
      ++reference[r.domain].second;
      reference[r.domain].first += *gold ? 1 : 0;
    }
  }
  for (auto& [key, row] : rows) out.rows.push_back(std::move(row));
  for (const auto& [domain, counts] : reference) out.signal.emplace_back(domain, scoring::gold_signal(counts.first, counts.second));
  return out;
}

std::string depth_accuracy_text(const DepthAccuracy& d) {
  if (d.empty()) return "";
  std::string text = "gold accuracy by depth of the evidence (items generated at each depth: the same documents, the "
                     "evidence moved; correct/answered)\n";
  text += fmt::format("  {:<14} {:>6}", "domain", "depth");
  for (const std::string& l : d.labels) text += fmt::format(" {:>12}", l);
  text += "\n";
  for (const DepthAccuracyRow& r : d.rows) {
    text += fmt::format("  {:<14} {:>6}", r.domain, depth_text(r.depth_permille));
    for (size_t c = 0; c < d.labels.size(); ++c) text += fmt::format(" {:>12}", depth_accuracy_cell(r, c));
    text += "\n";
  }
  for (const auto& [domain, s] : d.signal)
    if (!s.informative()) text += "  note: " + domain + ": " + s.note() + "\n";
  return text;
}

nlohmann::json depth_accuracy_json(const DepthAccuracy& d) {
  nlohmann::json rows = nlohmann::json::array();
  for (const DepthAccuracyRow& r : d.rows) {
    nlohmann::json configs = nlohmann::json::array();
    const bool informative = d.signal_of(r.domain).informative();
    for (size_t c = 0; c < d.specs.size(); ++c)
      configs.push_back({{"spec", d.specs[c]},
                         {"label", d.labels[c]},
                         {"correct", r.correct[c]},
                         {"answered", r.answered[c]},
                         {"accuracy", informative && r.answered[c] > 0
                                          ? nlohmann::json(static_cast<double>(r.correct[c]) / static_cast<double>(r.answered[c]))
                                          : nlohmann::json(nullptr)}});
    rows.push_back({{"domain", r.domain}, {"depth", r.depth_permille / 1000.0}, {"configs", configs}});
  }
  nlohmann::json signal = nlohmann::json::object();
  for (const auto& [domain, s] : d.signal)
    signal[domain] = {{"informative", s.informative()},
                      {"reference_correct", s.reference_correct},
                      {"reference_answered", s.reference_answered}};
  return {{"rows", rows}, {"gold_signal", signal}};
}

std::string depth_accuracy_markdown(const DepthAccuracy& d) {
  if (d.empty()) return "";
  std::string md = "\n**Gold accuracy by depth of the evidence** (the same documents with the evidence moved; "
                   "correct/answered)\n\n| domain | depth |";
  for (const std::string& l : d.labels) md += " " + l + " |";
  md += "\n|---|---:|";
  for (size_t c = 0; c < d.labels.size(); ++c) md += "---:|";
  md += "\n";
  for (const DepthAccuracyRow& r : d.rows) {
    md += "| " + r.domain + " | " + depth_text(r.depth_permille) + " |";
    for (size_t c = 0; c < d.labels.size(); ++c) md += " " + depth_accuracy_cell(r, c) + " |";
    md += "\n";
  }
  for (const auto& [domain, s] : d.signal)
    if (!s.informative()) md += "\n" + domain + ": " + s.note() + "\n";
  return md;
}

}  // namespace kvgate::harness
