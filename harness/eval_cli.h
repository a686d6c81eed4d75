#pragma once
// `kvgate eval` / `kvgate replay` as a function: their arguments, the flags that set them, and
// the run, for the commands that run an eval first (`kvgate compare --production ...`).
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "harness/engine_cli.h"
#include "harness/eval/eval_plan.h"
#include "harness/eval/runner.h"

namespace kvgate::harness {

struct EvalArgs {
  PlanFlags plan;
  std::string shard;  // --shard I/N
  std::string db;
  int64_t resume = 0;
  bool json = false;
  EvalOptions options;
  bool threads_given = false, max_new_tokens_given = false, backend_given = false;
  std::string command_line;
  uint64_t seed = 0;        // engine mode: the retry jitter stream
  LoadReplayOptions load;  // replay of a shape trace against endpoints
  bool allow_synthetic = false;
  // What the run prints when it ends: the summary table (and, with `verdicts`, the verdict per
  // config under ci/gates/rollout.json or `policy`); nothing at all when `summary` is false.
  bool summary = true, verdicts = true;
  std::string policy;  // --policy: the rollout policy of the verdicts ("" built in)
};

// The flags of a run that are neither its configs nor its source: --model, --db, --threads,
// --backend, --limit, --max-new-tokens, --allow-synthetic.
void add_eval_run_options(CLI::App* command, EvalArgs& a);
// Records which of --threads, --max-new-tokens, --backend were given (after parsing).
void note_eval_flags_given(CLI::App* command, EvalArgs& a);

// Runs (or resumes) the eval or replay `a` describes, prints what `a` asks for and returns the
// run's id; errors as `kvgate eval` reports them (exit 2 usage/input, 3 environment, 130/143
// interrupted). A load replay (a shape trace against endpoints) stores no scored run: 0.
int64_t run_eval_cmd(EvalArgs a);

}  // namespace kvgate::harness
