#pragma once
// The one owner of a run's store calls: it begins the run (or reopens the one a plan resumes)
// with its configs, tells which items a resumed run already holds, writes each item in one
// transaction, and marks the run complete, interrupted or failed. `kvgate eval` and `kvgate
// replay` reach the store only through it.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "harness/eval/eval_plan.h"
#include "kernels/kv_config.h"
#include "results/store.h"

namespace kvgate::harness {

// One item under one config. The recorder fills in every config_id.
struct ConfigItemRecord {
  results::ItemMetrics metrics;
  std::vector<results::TurnMetrics> turns;
  std::vector<results::TokenClassMetrics> token_classes;
  std::vector<results::LatencySamples> latency;
  std::vector<results::PositionMetrics> positions;
};

struct ItemRecord {
  results::ItemInfo info;
  std::vector<ConfigItemRecord> configs;  // in the plan's order
};

// What the recorder stores with each config beside its name: its storage sizes on the shape of
// the model it runs on, and that model; none for a config an endpoint serves (engine mode: the
// engine runs its own weights, recorded with the endpoint).
struct ConfigSetup {
  kernels::KvShape shape;
  std::optional<results::ConfigModel> model;
};

class RunRecorder {
 public:
  // The plan that continues stored run `run_id`: the stored plan's items (a --limit run's first
  // N), or the first `limit` if non-zero (a --limit given again, to extend or cut it). A shard run
  // continues as the same shard of the same items: usage error if `shard` (an explicit
  // --shard) or a non-zero `limit` says otherwise. Usage error: no such run, or it is complete.
  static EvalPlan plan_to_resume(results::Store& store, int64_t run_id, int64_t limit,
                                 const std::optional<ShardSpec>& shard);

  // `info` describes a new run; a plan that resumes a run keeps the stored description.
  // `plan_text` is describe_plan()'s text, recorded with the run with its hash.
  RunRecorder(results::Store& store, const EvalPlan& plan, results::RunInfo info, std::string plan_text);
  // A new run into the database at `db_path`, which open() opens (creating it if needed): a run
  // refused before it starts leaves no database behind.
  RunRecorder(std::string db_path, const EvalPlan& plan, results::RunInfo info, std::string plan_text);
  // A run opened but neither finished nor failed (an error on a path that did not call fail())
  // is marked failed here, so that no run stays 'running' after its process ended by itself.
  ~RunRecorder();
  RunRecorder(const RunRecorder&) = delete;
  RunRecorder& operator=(const RunRecorder&) = delete;

  // Writes the new run, attaches the plan's configs (their sizes and models from `setups`, one
  // per config in the plan's order) and records the plan (a shard also lists the plan's items
  // and their shards), or puts the resumed run back to 'running' with its plan brought up to
  // date. `calibration`: the workload its items are timed against (Calibration::workload(); ""
  // for none); a resumed run timed against another one than it began with records both, so its
  // calibrated latencies compare with no other run's. Nothing is written before this: call it
  // only once everything that can be checked without writing has been.
  void open(const std::vector<ConfigSetup>& setups, const std::string& calibration);
  int64_t run_id() const { return run_id_; }
  // The store the run is written to (for a new run: once open() has opened it).
  results::Store& store();
  const std::string& plan_hash() const { return plan_hash_; }
  // Whether every config of the plan already has this item stored (a resumed run skips it).
  bool holds(const std::string& item_key) const;
  void record(ItemRecord item);
  // Engine mode: what discovery found behind config `config_index` (after open()).
  void record_endpoint(size_t config_index, results::ConfigEndpoint endpoint);
  // Engine mode: an item that failed on an endpoint; nothing of it is stored, so it stays to do
  // (holds() is false) and a resumed run measures it again.
  void record_failure(const std::string& item_key, std::optional<size_t> config_index, const std::string& endpoint,
                      const std::string& failure, const std::string& message);
  // Load replay (harness/eval/load_replay.h): its settings, one config's requests (one
  // transaction), and the capacity simulator's prediction for that config.
  void record_load_replay(const results::LoadReplaySettings& settings);
  void record_load_requests(size_t config_index, std::vector<results::LoadRequest> requests);
  void record_capacity_prediction(size_t config_index, results::CapacityPrediction prediction);
  // complete: every item of the plan's selection is stored and --limit left none of the
  // workload out; otherwise the run stays resumable ('interrupted'). Both record the machine
  // load the run ran under (docs/schema.md, runs.load_avg_*).
  void finish(bool complete);
  // The run stopped on an error. Does nothing before open().
  void fail();

 private:
  void record_plan();
  void sample_load();
  void record_load();

  std::string db_path_;
  std::optional<results::Store> owned_store_;
  results::Store* store_ = nullptr;
  bool ended_ = false;  // finish() or fail() recorded how the run ended
  const EvalPlan& plan_;
  results::RunInfo info_;
  std::string plan_text_, plan_hash_;
  int64_t run_id_ = 0;
  std::vector<int64_t> config_ids_;  // in the plan's order
  std::set<std::pair<std::string, int64_t>> stored_;  // (item key, config id) already in the store
  // This invocation's machine load, merged at the end with what earlier invocations recorded.
  std::optional<results::RunLoad> earlier_load_;
  bool load_known_ = true;  // false: an earlier invocation stored items but no load (it was killed)
  results::RunLoad load_;
  double cpu_start_ = 0, wall_start_ = 0;
};

}  // namespace kvgate::harness
