#pragma once
// The command-line side of engine mode (docs/engine-mode.md) for `kvgate eval` and `kvgate
// replay`: the endpoint flags, what a resumed engine run is given again, the engine notes and
// cross-check table printed under the summary, and the load replay command.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "harness/engine_eval.h"
#include "harness/eval/eval_plan.h"
#include "harness/eval_runner.h"

namespace kvgate::harness {

// --endpoint, --endpoints, --ref-endpoint, --top-k.
void add_engine_options(CLI::App* command, PlanFlags& flags);

// A resumed run reconnects to its recorded endpoints; endpoints given again (by name) replace
// them — a server that moved, or a URL whose credentials the results redacted. Usage error for
// a name the run does not have, or a redacted URL not given again.
void apply_resumed_endpoints(EvalPlan& plan, const PlanFlags& flags);

nlohmann::json cross_check_json(const EvalResult& result, const std::vector<CrossCheck>& cross_checks);
// Under the summary table: which configs ran on which endpoint, that their KLD and Δp are
// top-k estimates, and the cross-check of emulation against engine per metric.
void print_engine_notes(const EvalResult& result, const std::vector<CrossCheck>& cross_checks);

struct LoadReplayOptions {
  std::string format = "auto";
  double time_scale = 1.0;
  int max_inflight = 0;
  int64_t max_output_tokens = 0;
  double slo_ttft_ms = 2000, slo_tpot_ms = 100;
  std::string gpu = "H100";
  std::string model_arch;  // preset or GGUF; default: the --model GGUF
  uint64_t seed = 0;
};
void add_load_replay_options(CLI::App* replay, LoadReplayOptions& options);

// `kvgate replay --trace FILE --endpoint ...` where FILE is a shape trace (not sessions).
bool is_load_replay(const PlanFlags& flags);
void run_load_replay_cmd(const PlanFlags& flags, LoadReplayOptions options, const std::string& db, bool json,
                         const std::string& command_line, int limit);

}  // namespace kvgate::harness
