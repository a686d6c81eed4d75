#pragma once
// Quality by position (issue 32) as `kvgate runs show` and `kvgate report` print it: per
// candidate config, per position bucket the run's scored tokens reach, the token-weighted mean
// KLD, Δp and same-top-1 (scoring/position_buckets.h), i.e. the degradation-versus-position curve.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "results/stored_run.h"
#include "scoring/position_buckets.h"

namespace kvgate::harness {

// The candidate configs' curves, in the run's config order (the reference, whose KLD is against
// itself, is left out). Empty for a run made before kvgate kept position rows.
std::vector<scoring::PositionCurve> run_position_curves(const results::StoredRun& run);

// The text block of `runs show` ("" without curves), its JSON (an array, one object per config
// with its buckets) and the report's Markdown table (buckets down, configs across: mean KLD).
std::string positions_text(const std::vector<scoring::PositionCurve>& curves);
nlohmann::json positions_json(const std::vector<scoring::PositionCurve>& curves);
std::string positions_markdown(const std::vector<scoring::PositionCurve>& curves);

}  // namespace kvgate::harness
