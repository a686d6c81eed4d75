#pragma once
// The results store: one SQLite file (WAL) holding runs, configs, items and every metric,
// each row traceable to the run, config and item that produced it. One Store is one
// connection: use one per thread or process; several may write the same file at once.
//
// Crash safety: everything an item produces is written in one transaction (ItemWriter), so a
// run killed at any point leaves whole items only, and its run row still says 'running'.
// finished_pairs() tells a resumed run which (item, config) pairs it can skip.
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "results/row_digest.h"
#include "results/sqlite.h"

namespace kvgate::results {

// The database path for a command: --db if given, else $KVGATE_DB if set and non-empty,
// else ./kvgate.db.
std::string resolve_db_path(const std::string& db_flag);

// Now, as every time column holds it: ISO 8601 UTC with milliseconds, "2026-12-02T09:55:00.123Z".
std::string now_utc();

enum class RunStatus { running, complete, failed, interrupted };
const char* run_status_name(RunStatus s);

enum class ConfigRole { reference, candidate };
const char* config_role_name(ConfigRole role);

struct RunInfo {
  std::string command;        // the command line that started the run
  std::string git_sha;
  std::string build_flags;
  std::string host, cpu, gpu, backend;
  std::string model_path, model_sha256;
  std::string suite_name, suite_hash;
  int64_t seed = 0;
  int64_t threads = 0;
  std::string kvgate_version;
  // The latency yardstick its items were timed against (harness/eval/calibration.h), as text;
  // empty: not calibrated (engine mode, a GPU backend, or a run made before v10). Two runs'
  // calibrated latencies compare only when this is the same.
  std::string calibration;
};

// What else the machine ran during a run: 1-minute load averages at its start and the highest
// between its items (its own threads included), its process CPU time and wall time, and the
// online cores. A resumed run adds up its invocations (the worst load, the summed times).
struct RunLoad {
  double load_avg_start = 0, load_avg_max = 0;
  double cpu_seconds = 0, wall_seconds = 0;
  int64_t cores = 0;
};

struct RunRecord {
  int64_t id = 0;
  RunStatus status = RunStatus::running;
  std::string started_at;
  std::string finished_at;  // empty while running
  RunInfo info;
  int64_t items = 0;  // items with at least one committed metrics row
  std::optional<RunLoad> load;  // nullopt: not recorded
};

struct ConfigInfo {
  std::string spec;  // canonical KV config string
  std::string hash;  // its stable hash (hex)
  double bits_per_element = 0.0;
};

// The model a config of a run ran on (weights as an axis, docs/models.md).
struct ConfigModel {
  std::string kv_spec;  // the config's KV part: its canonical KV spec
  std::string label;    // the config's weights part: the model file's stem
  std::string path, sha256;
  int64_t file_bytes = 0;
  int64_t weight_bytes = 0;  // what the tensors hold
  std::string weight_type;   // the stored type holding most of those bytes, e.g. "Q4_0"
};

struct RunConfigRecord {
  int64_t config_id = 0;
  std::string spec, hash;
  ConfigRole role = ConfigRole::candidate;
  double bits_per_element = 0.0;
  double kv_bytes_per_token = 0.0;  // NaN when not known
  // How KLD and Δp were measured: "full" (every logit) or "topk" (scoring/topk_kld.h's
  // estimator from the top_k logprobs of each side, as engine mode measures them).
  std::string kld_estimator = "full";
  std::optional<int64_t> top_k = std::nullopt;
  std::optional<ConfigModel> model;  // nullopt: a run made before models were recorded per config
  // The config as the user typed it (`q4_0`, `Q4_0+q4_0`, `endpoint:NAME`), what tables show;
  // the spec for a run made before labels were recorded. Results are keyed by `spec`.
  std::string label;
};

// The calibration workload's times around one item (docs/gates.md, "How latency is gated"): the
// geometric mean of the samples timed just before and just after it, in wall milliseconds.
struct ItemCalibration {
  double prefill_ms = 0, decode_ms = 0;
};

struct ItemInfo {
  std::string item_key;  // the eval item's id, or the session id of a replayed trace
  std::string domain;
  std::string evalset_hash;
  std::string item_hash;
  std::optional<std::string> gold_answer = std::nullopt;  // the eval item's gold answer, if it has one
  std::optional<ItemCalibration> calibration = std::nullopt;  // nullopt: the run was not calibrated
};

// One item under one config. Metrics that were not measured are NaN / nullopt (NULL).
struct ItemMetrics {
  int64_t config_id = 0;
  int64_t scored_tokens = 0;
  double kld_mean = 0, kld_max = 0, kld_p99 = 0;
  double delta_p_mean = 0, delta_p_rms = 0;
  double same_top1 = 0;  // fraction in [0, 1]
  double nll_mean = 0, nll_ref_mean = 0;
  std::optional<int64_t> generated_tokens;
  std::optional<int64_t> first_divergence;  // nullopt: no divergence (or not generated)
  std::optional<bool> exact_match_ref, exact_match_gold;
  // Not columns: derived from the item's turn rows (StoredRun::load, the runner's accumulator).
  // Turns with a greedy answer, and of those the ones whose answer ended at its first token
  // (answer_tokens == 0) or whose first token differs from the reference's (answer_divergence == 0).
  int64_t answered_turns = 0, first_token_eos = 0, first_token_differs = 0;
};

struct TurnMetrics {
  int64_t config_id = 0;
  int64_t turn_index = 0;
  int64_t context_tokens = 0;
  int64_t scored_tokens = 0;
  double kld_mean = 0, same_top1 = 0;
  double ttft_ms = 0, tpot_ms = 0;
  // The greedy request's prompt and the part of it the engine served from its prefix cache,
  // as the engine reports them (engine mode only).
  std::optional<int64_t> prompt_tokens = std::nullopt, cached_tokens = std::nullopt;
  // The greedy answer this config gave after the turn's context, as text (the tokenizer's
  // decoding, or the engine's text), its length in tokens, and the token index where it first
  // differs from the reference config's answer to the same turn (nullopt: the same answer, or
  // the reference itself). nullopt answer: not generated (or a run made before answers were kept).
  std::optional<std::string> answer = std::nullopt;
  std::optional<int64_t> answer_tokens = std::nullopt, answer_divergence = std::nullopt;
  // TTFT and TPOT in CPU time of the work (core/cpu_time.h), in-process only; NaN (NULL): not
  // measured (an endpoint's, or a run made before v10).
  double ttft_cpu_ms = std::numeric_limits<double>::quiet_NaN(), tpot_cpu_ms = std::numeric_limits<double>::quiet_NaN();
};

// One position bucket of one turn under one config (docs/schema.md "Position buckets"): the sums
// over the turn's scored tokens whose absolute position lies in [position_from, position_to).
struct PositionMetrics {
  int64_t config_id = 0;
  int64_t turn_index = 0;
  int64_t position_from = 0;
  std::optional<int64_t> position_to;  // nullopt: the open-ended last bucket
  int64_t scored_tokens = 0;
  double kld_sum = 0, delta_p_sum = 0;
  int64_t same_top1 = 0;
};

struct RunPositionMetrics {
  std::string item_key, domain;
  PositionMetrics position;
};

// Sums rather than means, so classes aggregate exactly over items and runs.
struct TokenClassMetrics {
  int64_t config_id = 0;
  std::string token_class;  // digits | hangul | code_punct | other
  int64_t scored_tokens = 0;
  double kld_sum = 0, delta_p_sum = 0;
  int64_t same_top1 = 0;
};

struct LatencySamples {
  int64_t config_id = 0;
  int64_t turn_index = 0;
  std::vector<double> token_times_ms;  // emission time of each token, from request arrival
};

struct KernelBenchmark {
  std::string kernel, format, backend;
  int64_t head_dim = 0, tokens = 0, iterations = 0;
  double ns_per_iteration = 0;
  double bytes_per_second = 0, bound_bytes_per_second = 0;
};

struct GateDecision {
  int64_t baseline_run_id = 0, candidate_run_id = 0;
  std::optional<int64_t> config_id;
  std::string check_name, metric;
  bool passed = false;
  double baseline_value = 0, candidate_value = 0, delta = 0, ci_low = 0, ci_high = 0, threshold = 0;
  std::string detail;
};

// One item's metrics under one config, with the item's identity: what gates and reports pair.
struct RunItemMetrics {
  std::string item_key, domain;
  ItemMetrics metrics;
};

struct RunTurnMetrics {
  std::string item_key, domain;
  TurnMetrics turn;
};

// What decides a run's numbers (docs/scale-out.md): `plan` is canonical text, one "key value"
// per line, and `plan_hash` its hash; runs of one plan, sharded or not, share both. A shard run
// also has its place in the plan.
struct RunPlan {
  std::string plan_hash;
  std::string plan;
  int64_t plan_items = 0;  // items of the whole plan, before any partition
  std::optional<int64_t> shard_index, shard_count;  // nullopt: not a shard
  std::string shard_origin;  // where the shard came from: "--shard", "SLURM_ARRAY_TASK_ID=...", ...
};

// One item of a shard's plan: its position in the plan's order and the shard it belongs to.
struct PlanItem {
  int64_t position = 0;
  std::string item_key;
  int64_t shard_index = 0;
};

// One shard run a merged run was made from.
struct MergeSource {
  int64_t shard_index = 0, shard_count = 0;
  std::string source_db;
  int64_t source_run_id = 0;
  std::string host, started_at, finished_at;
  std::string digest;  // of the shard run's stored rows: the same digest means the same shard run
};

struct MergeResult {
  int64_t run_id = 0;
  bool already_merged = false;  // these shards were merged into this database before: nothing written
  RunStatus status = RunStatus::complete;  // the merged run's: interrupted for a --limit plan
  int64_t items = 0, shards = 0;
  std::string plan_hash;
};

// Engine mode (docs/engine-mode.md). The serving endpoint behind one config of a run.
struct ConfigEndpoint {
  int64_t config_id = 0;
  std::string name;            // the endpoint's name (--endpoint NAME=URL)
  std::string url;             // credentials redacted
  std::string engine;          // vllm | sglang | llama-server | openai
  std::string engine_version;  // as the engine reports it ("" when it does not)
  std::string model;           // the served model the engine reports
  std::string kv;              // the KV config it runs, canonical
  std::string kv_source;       // stated (endpoints file "kv") | name (NAME parsed) | engine (reported)
  std::string kv_reported;     // what the engine reports ("" when it does not)
  std::string discovery;       // the discovery answers, compact JSON
};

// An item that could not be measured on an endpoint; its metrics were not written, so a
// resumed run measures it again (and a stored item clears its failure).
struct ItemFailure {
  std::string item_key;
  std::optional<int64_t> config_id;
  std::string endpoint;  // endpoint name
  std::string failure;   // serving::failure_name: connect, http_status, timeout, stall, broken, consumer
  std::string message;
  std::string failed_at;  // set by the store
};

struct LoadReplaySettings {
  std::string trace, format;
  int64_t requests = 0;
  double time_scale = 1.0;
  int64_t max_inflight = 0;
  double slo_ttft_ms = 0, slo_tpot_ms = 0;
  int64_t block_tokens = 0;
  std::string predict_gpu, predict_model;
};

// One request of a load replay against one config's endpoint. Times are ms from the request's
// (scaled) arrival in the trace; NULL/NaN where not measured (a failed request, one token).
struct LoadRequest {
  int64_t config_id = 0;
  int64_t request_index = 0;
  double arrival_ms = 0;
  int64_t prompt_tokens = 0, max_tokens = 0;
  bool ok = false;
  std::string failure;  // "" when ok
  int64_t output_tokens = 0;
  std::optional<int64_t> cached_tokens;
  double ttft_ms = 0, tpot_ms = 0, latency_ms = 0, max_gap_ms = 0;
};

// What `kvgate capacity` predicts for the same trace and config (workloads/simulator.h).
struct CapacityPrediction {
  int64_t config_id = 0;
  double hit_rate = 0;
  double ttft_p50_ms = 0, ttft_p95_ms = 0, ttft_p99_ms = 0, tpot_p50_ms = 0, tpot_p95_ms = 0;
  double output_tokens_per_s = 0;
  int64_t kv_token_capacity = 0;
  std::string verdict;
};

class Store;

// Writes everything one item produces in one transaction. Nothing is visible to other
// connections until commit(); destroying an uncommitted writer rolls all of it back.
class ItemWriter {
 public:
  int64_t item_row_id() const { return item_row_id_; }
  void add_metrics(const ItemMetrics& m);
  void add_turn(const TurnMetrics& t);
  void add_token_class(const TokenClassMetrics& c);
  void add_position(const PositionMetrics& p);  // results/store_positions.cc
  void add_latency(const LatencySamples& s);
  void commit();

 private:
  friend class Store;
  ItemWriter(Connection& connection, Transaction transaction, int64_t run_id, int64_t item_row_id, ItemRowSeal seal)
      : connection_(connection), transaction_(std::move(transaction)), run_id_(run_id), item_row_id_(item_row_id),
        seal_(seal) {}
  Connection& connection_;
  Transaction transaction_;
  int64_t run_id_;
  int64_t item_row_id_;
  ItemRowSeal seal_;  // the rows written, added to the run's seal in the same transaction
};

class Store {
 public:
  enum class Mode { create, existing, update };
  // create: makes the file if needed (removing it again if that fails) and migrates it to the
  // latest schema; a file that was there must pass quick_check.
  // existing: the file must exist and already be a kvgate database (for read-only commands),
  // pass quick_check, and is opened read-only where it cannot be written.
  // update: as existing, for a command that writes into what the file holds (`eval --resume`):
  // never created, and refused where it cannot be written.
  // Every mode checks the tables against the schema (row_digest.h, check_schema).
  // Errors (kvgate::Error): input for a missing file where one must exist, a path that is not a
  // regular file, a file that is not a kvgate database or is damaged, or one whose schema is
  // newer than this build knows.
  static Store open(const std::string& path, Mode mode = Mode::create);

  const std::string& path() const { return connection_->path(); }
  // True when opened read-only (Mode::existing on a file or directory this process cannot
  // write); writing then fails.
  bool read_only() const;
  // Input error naming the file when SQLite's quick_check finds damage (Mode::existing runs it
  // on open, so every reader of a stored run, gate and merge included, refuses a damaged file).
  void check_integrity();
  int schema_version();
  // Checks every row of the run against its digest and the run's seal (row_digest.h), once per
  // Store: every reader of a run's rows below calls it first. Input error naming the row.
  void check_run(int64_t run_id);

  int64_t begin_run(const RunInfo& info);
  void finish_run(int64_t run_id, RunStatus status);
  // Puts an unfinished run back to 'running' so it can be continued (see finished_pairs).
  void resume_run(int64_t run_id);
  // Records the run's machine load (nullopt: unknown, stored as NULL).
  void record_run_load(int64_t run_id, const std::optional<RunLoad>& load);
  // A resumed run timed with another yardstick than it was begun with records both (RunInfo::calibration).
  void record_run_calibration(int64_t run_id, const std::string& calibration);

  int64_t add_config(const ConfigInfo& config);  // returns the existing id for a known spec
  void attach_config(int64_t run_id, int64_t config_id, ConfigRole role, double kv_bytes_per_token);
  // Records (or replaces) how the user typed an attached config of the run (RunConfigRecord::label).
  void set_config_label(int64_t run_id, int64_t config_id, const std::string& label);
  // Records (or replaces) the model an attached config of the run runs on.
  void record_config_model(int64_t run_id, int64_t config_id, const ConfigModel& model);

  ItemWriter begin_item(int64_t run_id, const ItemInfo& item);

  void add_kernel_benchmark(int64_t run_id, const KernelBenchmark& b);
  int64_t add_gate_decision(const GateDecision& d);

  std::vector<RunRecord> list_runs();
  std::optional<RunRecord> find_run(int64_t run_id);
  // "latest" (the highest id) or a decimal id; input error naming the database otherwise.
  RunRecord resolve_run(const std::string& ref);
  std::vector<RunConfigRecord> run_configs(int64_t run_id);
  std::set<std::pair<std::string, int64_t>> finished_pairs(int64_t run_id);  // (item_key, config_id)
  std::optional<ItemMetrics> item_metrics(int64_t run_id, const std::string& item_key, int64_t config_id);
  // Every item of a run, ordered by item key.
  std::vector<ItemInfo> run_items(int64_t run_id);
  // Every (item, config) metrics row of a run, ordered by item key then config id.
  std::vector<RunItemMetrics> run_item_metrics(int64_t run_id);
  // Every per-turn row of a run, ordered by item key, config id, turn index.
  std::vector<RunTurnMetrics> run_turn_metrics(int64_t run_id);
  // Every position-bucket row of a run, ordered by item key, config id, turn index, position
  // (results/store_positions.cc).
  std::vector<RunPositionMetrics> run_position_metrics(int64_t run_id);
  // Gate decisions stored with this run as the candidate, oldest first.
  std::vector<GateDecision> gate_decisions_for_candidate(int64_t candidate_run_id);

  // Records (or, for a resumed run, replaces) the run's plan and, for a shard, the plan's items.
  void record_plan(int64_t run_id, const RunPlan& plan, const std::vector<PlanItem>& items);
  std::optional<RunPlan> run_plan(int64_t run_id);       // nullopt: made before plans were recorded
  std::vector<PlanItem> run_plan_items(int64_t run_id);  // by position; empty unless a shard
  std::vector<MergeSource> merge_sources(int64_t run_id);  // by shard index; empty unless merged

  // `kvgate runs merge` (results/merge.cc): the latest run of each shard database, checked to be
  // the N shards of one plan, each complete, every item of the plan held exactly once, written
  // into `out_path` (created if missing) as one run, in one transaction. Merging the same shard
  // runs again returns the run they made (already_merged) and writes nothing. Input error (exit
  // 2) naming the database, shard and items at fault otherwise; nothing is written then.
  static MergeResult merge_shards(const std::string& out_path, const std::vector<std::string>& shard_paths,
                                  const std::string& command);

  // Engine mode (results/store_engine.cc).
  void set_config_estimator(int64_t run_id, int64_t config_id, const std::string& estimator, std::optional<int64_t> top_k);
  void add_config_endpoint(int64_t run_id, const ConfigEndpoint& endpoint);  // replaces a resumed run's row
  std::vector<ConfigEndpoint> config_endpoints(int64_t run_id);               // by config id
  // Replaces the item's earlier failure, if any; the item's metrics are not touched.
  void record_item_failure(int64_t run_id, const ItemFailure& failure);
  std::vector<ItemFailure> item_failures(int64_t run_id);  // by item key
  void add_load_replay(int64_t run_id, const LoadReplaySettings& settings);
  std::optional<LoadReplaySettings> load_replay(int64_t run_id);
  // One config's requests, in one transaction.
  void add_load_requests(int64_t run_id, const std::vector<LoadRequest>& requests);
  std::vector<LoadRequest> load_requests(int64_t run_id);  // by config id, request index
  void add_capacity_prediction(int64_t run_id, const CapacityPrediction& prediction);
  std::vector<CapacityPrediction> capacity_predictions(int64_t run_id);  // by config id

  // How many times this process has read each stored table of a run through the readers above
  // that return a whole run's rows ((table, run id) -> reads): a test hook, so that a test can
  // show a command reads each table of a run once (StoredRun::load).
  static std::map<std::pair<std::string, int64_t>, int64_t> run_table_reads();

 private:
  explicit Store(std::unique_ptr<Connection> connection) : connection_(std::move(connection)) {}
  void migrate(bool create);
  // Every whole-run reader starts here: counts the read (run_table_reads) and checks the run.
  void begin_run_read(const char* table, int64_t run_id);
  std::unique_ptr<Connection> connection_;
  std::set<int64_t> checked_runs_;  // runs whose rows check_run found sound
};

}  // namespace kvgate::results
