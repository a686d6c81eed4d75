#pragma once
// Quality by position (issue 32) as `kvgate runs show` and `kvgate report` print it: per
// candidate config, per position bucket the run's scored tokens reach, the token-weighted mean
// KLD, Δp and same-top-1 (scoring/position_buckets.h), i.e. the degradation-versus-position curve;
// with, per bucket, its documents (items), tokens and an interval from a bootstrap over
// documents, and the paired depth effect on the same documents (issue 42,
// scoring/depth_effect.h): each bucket against the shallowest, and the deepest such pair as the
// headline.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "results/stored_run.h"
#include "scoring/depth_effect.h"
#include "scoring/position_buckets.h"

namespace kvgate::harness {

// The candidate configs' curves, in the run's config order (the reference, whose KLD is against
// itself, is left out). Empty for a run made before kvgate kept position rows.
std::vector<scoring::PositionCurve> run_position_curves(const results::StoredRun& run);

// The curves with their depth view: depth[i] belongs to curves[i].
struct PositionView {
  std::vector<scoring::PositionCurve> curves;
  std::vector<scoring::DepthCurve> depth;
  scoring::BootstrapSettings bootstrap;
  bool empty() const { return curves.empty(); }
  // Whether any config reaches more than one bucket: otherwise there is no depth to compare
  // (a run of short items), and the depth-effect lines are left out.
  bool has_depth() const;
};
PositionView run_positions(const results::StoredRun& run, const scoring::BootstrapSettings& bootstrap);
// The bootstrap `runs show` and the report draw the depth view's intervals with: the built-in
// gate policy's (ci/gates/default.json "bootstrap"), so that the same run shows the same
// intervals whichever rollout policy its verdicts are read against.
scoring::BootstrapSettings positions_bootstrap();

// "fp8: mean KLD at 4-8k is 1.52x its 0-1k value on the same 6 documents [1.14x, 2.07x] ...",
// or why there is no depth effect.
std::string depth_effect_line(const std::string& label, const std::optional<scoring::DepthEffect>& effect,
                              const scoring::BootstrapSettings& bootstrap);

// The text block of `runs show` ("" without curves), its JSON (an array, one object per config
// with its buckets and depth effect) and the report's Markdown table (buckets down, configs
// across: mean KLD with its interval) with the depth effects under it.
std::string positions_text(const PositionView& view);
nlohmann::json positions_json(const PositionView& view);
std::string positions_markdown(const PositionView& view);

}  // namespace kvgate::harness
