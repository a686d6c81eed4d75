#pragma once
// Gold accuracy by the depth of the evidence (issue 42): needle retrieval at controlled depths.
// Items generated at a given depth (`evalset generate --depth 0.1,0.5,0.9`, a suite's "depth"
// list: the same haystacks with the needle moved) carry it in their ids
// (evalsets::generated_depth_permille); per (domain, depth), each config's gold exact matches of
// those items. Whether the numbers say anything follows the one gold rule
// (scoring::gold_signal) over the reference's answers to the domain's items at every depth:
// where the reference cannot do the task at all, no depth of it is informative.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "results/stored_run.h"
#include "scoring/aggregate.h"

namespace kvgate::harness {

struct DepthAccuracyRow {
  std::string domain;
  int depth_permille = 0;
  std::vector<int64_t> correct, answered;  // per config of DepthAccuracy::configs
};

struct DepthAccuracy {
  std::vector<std::string> specs, labels;  // the run's configs, reference first
  std::vector<DepthAccuracyRow> rows;      // by domain, then depth
  // Per domain (in the rows' order), the reference's answers over every depth.
  std::vector<std::pair<std::string, scoring::GoldSignal>> signal;
  const scoring::GoldSignal& signal_of(const std::string& domain) const;
  bool empty() const { return rows.empty(); }
};

// Empty unless the run holds gold-answered items whose ids name a depth.
DepthAccuracy run_depth_accuracy(const results::StoredRun& run);

// "0.25"; and a row's cell for config c, "4/5" ("-": none answered), as every table shows them.
std::string depth_text(int depth_permille);
std::string depth_accuracy_cell(const DepthAccuracyRow& r, size_t c);

std::string depth_accuracy_text(const DepthAccuracy& d);  // "" when empty
nlohmann::json depth_accuracy_json(const DepthAccuracy& d);
std::string depth_accuracy_markdown(const DepthAccuracy& d);  // "" when empty

}  // namespace kvgate::harness
