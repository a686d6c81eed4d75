#pragma once
// The one owner of a run's store calls: it begins the run (or reopens the one a plan resumes)
// with its configs, tells which items a resumed run already holds, writes each item in one
// transaction, and marks the run complete, interrupted or failed. `kvgate eval` and `kvgate
// replay` reach the store only through it.
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "harness/eval_plan.h"
#include "kernels/kv_config.h"
#include "results/store.h"

namespace kvgate::harness {

// One item under one config. The recorder fills in every config_id.
struct ConfigItemRecord {
  results::ItemMetrics metrics;
  std::vector<results::TurnMetrics> turns;
  std::vector<results::TokenClassMetrics> token_classes;
  std::vector<results::LatencySamples> latency;
};

struct ItemRecord {
  results::ItemInfo info;
  std::vector<ConfigItemRecord> configs;  // in the plan's order
};

class RunRecorder {
 public:
  // The plan that continues stored run `run_id`. Usage error: no such run, or it is complete.
  static EvalPlan plan_to_resume(results::Store& store, int64_t run_id);

  // `info` describes a new run; a plan that resumes a run keeps the stored description.
  RunRecorder(results::Store& store, const EvalPlan& plan, results::RunInfo info);

  // Writes the new run and attaches the plan's configs (their sizes for `shape`), or puts the
  // resumed run back to 'running'. Nothing is written before this.
  void open(const kernels::KvShape& shape);
  int64_t run_id() const { return run_id_; }
  // Whether every config of the plan already has this item stored (a resumed run skips it).
  bool holds(const std::string& item_key) const;
  void record(ItemRecord item);
  // complete: every item of the workload is stored; otherwise the run stays resumable
  // ('interrupted', e.g. after --limit).
  void finish(bool complete);
  // The run stopped on an error. Does nothing before open().
  void fail();

 private:
  results::Store& store_;
  const EvalPlan& plan_;
  results::RunInfo info_;
  int64_t run_id_ = 0;
  std::vector<int64_t> config_ids_;  // in the plan's order
  std::set<std::pair<std::string, int64_t>> stored_;  // (item key, config id) already in the store
};

}  // namespace kvgate::harness
