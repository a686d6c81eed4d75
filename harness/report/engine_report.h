#pragma once
// What engine mode adds to `kvgate runs show`, `kvgate report` and the replay command's own
// output, from the stored rows: endpoints and estimators per config, failed items, and a load
// replay's measurements beside the capacity simulator's prediction. One place computes these
// (scoring/load_summary.h for the load numbers), so every consumer shows the same bits.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "results/stored_run.h"
#include "scoring/load_summary.h"

namespace kvgate::harness {

struct LoadConfigSummary {
  int64_t config_id = 0;
  std::string spec, endpoint;
  scoring::LoadSummary measured;
  std::optional<results::CapacityPrediction> predicted;
};

struct EngineRunView {
  std::vector<results::StoredConfig> configs;
  std::vector<results::ConfigEndpoint> endpoints;  // by config id
  std::vector<results::ItemFailure> failures;
  std::optional<results::LoadReplaySettings> load;
  std::vector<LoadConfigSummary> load_summaries;  // in config order

  // Cross-check pairs (in-process spec, endpoint spec) running the same KV config.
  std::vector<std::pair<std::string, std::string>> cross_pairs;
  // What the stored rows lack and why, one sentence each: an endpoint that answered but never
  // reported a cached prompt token (vLLM without --enable-prompt-tokens-details), whose hit
  // rate is therefore unknown rather than zero.
  std::vector<std::string> notes;

  bool engine_mode() const { return !endpoints.empty(); }
  const results::ConfigEndpoint* endpoint_of(int64_t config_id) const;
  // "top-k estimates (k = 20)" when the run's KLD and Δp are top-k estimates, else "".
  std::string estimator_note() const;
};

EngineRunView read_engine_view(const results::StoredRun& run);

// Plain-text sections (each ends with a newline; "" when the run has none of it).
std::string endpoints_text(const EngineRunView& view);
std::string failures_text(const EngineRunView& view);
std::string load_text(const EngineRunView& view);
// The same as Markdown (a heading and a table each) and as XHTML sections.
std::string engine_markdown(const EngineRunView& view);
std::string engine_html(const EngineRunView& view);
nlohmann::json engine_json(const EngineRunView& view);

}  // namespace kvgate::harness
