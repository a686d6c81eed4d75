#include "results/schema.h"

namespace kvgate::results {

namespace {

// Times are ISO 8601 UTC text ("2026-12-02T09:55:00.123Z") so they sort and read well in
// the sqlite3 shell. REAL columns hold IEEE doubles; NULL stands for "not measured" (and for
// NaN, which SQLite cannot store).
constexpr std::string_view kMigration1 = R"sql(
CREATE TABLE runs (
  id             INTEGER PRIMARY KEY AUTOINCREMENT,
  status         TEXT NOT NULL CHECK (status IN ('running', 'complete', 'failed', 'interrupted')),
  started_at     TEXT NOT NULL,
  finished_at    TEXT,
  command        TEXT NOT NULL,
  git_sha        TEXT NOT NULL,
  build_flags    TEXT NOT NULL,
  host           TEXT NOT NULL,
  cpu            TEXT NOT NULL,
  gpu            TEXT NOT NULL,
  backend        TEXT NOT NULL,
  model_path     TEXT NOT NULL,
  model_sha256   TEXT NOT NULL,
  suite_name     TEXT NOT NULL,
  suite_hash     TEXT NOT NULL,
  seed           INTEGER NOT NULL,
  threads        INTEGER NOT NULL,
  kvgate_version TEXT NOT NULL
);

CREATE TABLE configs (
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  spec             TEXT NOT NULL UNIQUE,
  hash             TEXT NOT NULL,
  bits_per_element REAL NOT NULL
);

CREATE TABLE run_configs (
  run_id             INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  config_id          INTEGER NOT NULL REFERENCES configs(id),
  role               TEXT NOT NULL CHECK (role IN ('reference', 'candidate')),
  kv_bytes_per_token REAL,
  PRIMARY KEY (run_id, config_id)
);

CREATE TABLE items (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  item_key      TEXT NOT NULL,
  domain        TEXT NOT NULL,
  evalset_hash  TEXT NOT NULL,
  item_hash     TEXT NOT NULL,
  UNIQUE (run_id, item_key)
);

CREATE TABLE item_metrics (
  item_id          INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
  config_id        INTEGER NOT NULL REFERENCES configs(id),
  scored_tokens    INTEGER NOT NULL,
  kld_mean         REAL,
  kld_max          REAL,
  kld_p99          REAL,
  delta_p_mean     REAL,
  delta_p_rms      REAL,
  top1_agreement   REAL,
  nll_mean         REAL,
  nll_ref_mean     REAL,
  generated_tokens INTEGER,
  first_divergence INTEGER,
  exact_match_ref  INTEGER CHECK (exact_match_ref IN (0, 1)),
  exact_match_gold INTEGER CHECK (exact_match_gold IN (0, 1)),
  PRIMARY KEY (item_id, config_id)
);

CREATE TABLE turn_metrics (
  item_id        INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
  config_id      INTEGER NOT NULL REFERENCES configs(id),
  turn_index     INTEGER NOT NULL,
  context_tokens INTEGER NOT NULL,
  scored_tokens  INTEGER NOT NULL,
  kld_mean       REAL,
  top1_agreement REAL,
  ttft_ms        REAL,
  tpot_ms        REAL,
  PRIMARY KEY (item_id, config_id, turn_index)
);

CREATE TABLE token_class_metrics (
  item_id       INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
  config_id     INTEGER NOT NULL REFERENCES configs(id),
  token_class   TEXT NOT NULL CHECK (token_class IN ('digits', 'hangul', 'code_punct', 'other')),
  scored_tokens INTEGER NOT NULL,
  kld_sum       REAL NOT NULL,
  delta_p_sum   REAL NOT NULL,
  same_top1     INTEGER NOT NULL,
  PRIMARY KEY (item_id, config_id, token_class)
);

CREATE TABLE latency_samples (
  item_id     INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
  config_id   INTEGER NOT NULL REFERENCES configs(id),
  turn_index  INTEGER NOT NULL,
  token_index INTEGER NOT NULL,
  t_ms        REAL NOT NULL,
  PRIMARY KEY (item_id, config_id, turn_index, token_index)
);

CREATE TABLE kernel_benchmarks (
  id                     INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id                 INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  kernel                 TEXT NOT NULL,
  format                 TEXT NOT NULL,
  backend                TEXT NOT NULL,
  head_dim               INTEGER NOT NULL,
  tokens                 INTEGER NOT NULL,
  iterations             INTEGER NOT NULL,
  ns_per_iteration       REAL NOT NULL,
  bytes_per_second       REAL,
  bound_bytes_per_second REAL
);

CREATE TABLE gate_decisions (
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  baseline_run_id  INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  candidate_run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  config_id        INTEGER REFERENCES configs(id),
  check_name       TEXT NOT NULL,
  metric           TEXT NOT NULL,
  passed           INTEGER NOT NULL CHECK (passed IN (0, 1)),
  baseline_value   REAL,
  candidate_value  REAL,
  delta            REAL,
  ci_low           REAL,
  ci_high          REAL,
  threshold        REAL,
  detail           TEXT NOT NULL,
  decided_at       TEXT NOT NULL
);

CREATE INDEX items_by_run ON items(run_id);
CREATE INDEX item_metrics_by_config ON item_metrics(config_id);
CREATE INDEX kernel_benchmarks_by_run ON kernel_benchmarks(run_id);
CREATE INDEX gate_decisions_by_candidate ON gate_decisions(candidate_run_id);
)sql";

// Sharded runs (docs/scale-out.md). Every eval/replay run records its plan: the canonical text of
// everything that decides its numbers and that hash, which shards of one plan share. A shard
// also lists the plan's items with the shard each belongs to, so a merge can name what is
// missing; a merged run lists the shard runs it was made from.
constexpr std::string_view kMigrationShardedRuns = R"sql(
CREATE TABLE run_plans (
  run_id       INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
  plan_hash    TEXT NOT NULL,
  plan         TEXT NOT NULL,
  plan_items   INTEGER NOT NULL,
  shard_index  INTEGER,
  shard_count  INTEGER,
  shard_origin TEXT,
  CHECK ((shard_index IS NULL) = (shard_count IS NULL)),
  CHECK (shard_count IS NULL OR (shard_count >= 1 AND shard_index >= 0 AND shard_index < shard_count))
);

CREATE TABLE run_plan_items (
  run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  position    INTEGER NOT NULL,
  item_key    TEXT NOT NULL,
  shard_index INTEGER NOT NULL,
  PRIMARY KEY (run_id, position)
);

CREATE TABLE run_merges (
  run_id        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  shard_index   INTEGER NOT NULL,
  shard_count   INTEGER NOT NULL,
  source_db     TEXT NOT NULL,
  source_run_id INTEGER NOT NULL,
  host          TEXT NOT NULL,
  started_at    TEXT NOT NULL,
  finished_at   TEXT,
  digest        TEXT NOT NULL,
  PRIMARY KEY (run_id, shard_index)
);
)sql";

// Engine mode (docs/engine-mode.md): configs served by a live engine over HTTP, metrics that
// are top-k estimates, items that failed on an endpoint (resumable), prefix-cache hits per
// turn, and load replays of shape traces with the capacity simulator's prediction beside them.
constexpr std::string_view kMigrationEngineMode = R"sql(
ALTER TABLE run_configs ADD COLUMN kld_estimator TEXT NOT NULL DEFAULT 'full' CHECK (kld_estimator IN ('full', 'topk'));
ALTER TABLE run_configs ADD COLUMN top_k INTEGER;

ALTER TABLE turn_metrics ADD COLUMN prompt_tokens INTEGER;
ALTER TABLE turn_metrics ADD COLUMN cached_tokens INTEGER;

CREATE TABLE config_endpoints (
  run_id         INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  config_id      INTEGER NOT NULL REFERENCES configs(id),
  name           TEXT NOT NULL,
  url            TEXT NOT NULL,
  engine         TEXT NOT NULL,
  engine_version TEXT NOT NULL,
  model          TEXT NOT NULL,
  kv             TEXT NOT NULL,
  kv_source      TEXT NOT NULL CHECK (kv_source IN ('stated', 'name', 'engine')),
  kv_reported    TEXT NOT NULL,
  discovery      TEXT NOT NULL,
  PRIMARY KEY (run_id, config_id)
);

CREATE TABLE item_failures (
  run_id    INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  item_key  TEXT NOT NULL,
  config_id INTEGER REFERENCES configs(id),
  endpoint  TEXT NOT NULL,
  failure   TEXT NOT NULL,
  message   TEXT NOT NULL,
  failed_at TEXT NOT NULL,
  PRIMARY KEY (run_id, item_key)
);

CREATE TABLE load_replays (
  run_id        INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
  trace         TEXT NOT NULL,
  format        TEXT NOT NULL,
  requests      INTEGER NOT NULL,
  time_scale    REAL NOT NULL,
  max_inflight  INTEGER NOT NULL,
  slo_ttft_ms   REAL NOT NULL,
  slo_tpot_ms   REAL NOT NULL,
  block_tokens  INTEGER NOT NULL,
  predict_gpu   TEXT NOT NULL,
  predict_model TEXT NOT NULL
);

CREATE TABLE load_requests (
  run_id         INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  config_id      INTEGER NOT NULL REFERENCES configs(id),
  request_index  INTEGER NOT NULL,
  arrival_ms     REAL NOT NULL,
  prompt_tokens  INTEGER NOT NULL,
  max_tokens     INTEGER NOT NULL,
  ok             INTEGER NOT NULL CHECK (ok IN (0, 1)),
  failure        TEXT NOT NULL,
  output_tokens  INTEGER NOT NULL,
  cached_tokens  INTEGER,
  ttft_ms        REAL,
  tpot_ms        REAL,
  latency_ms     REAL,
  max_gap_ms     REAL,
  PRIMARY KEY (run_id, config_id, request_index)
);

CREATE TABLE capacity_predictions (
  run_id            INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  config_id         INTEGER NOT NULL REFERENCES configs(id),
  hit_rate          REAL,
  ttft_p50_ms       REAL,
  ttft_p95_ms       REAL,
  ttft_p99_ms       REAL,
  tpot_p50_ms       REAL,
  tpot_p95_ms       REAL,
  output_tokens_per_s REAL,
  kv_token_capacity INTEGER,
  verdict           TEXT NOT NULL,
  PRIMARY KEY (run_id, config_id)
);
)sql";

// Weights as an axis (docs/models.md): the model each config of a run ran on, so one run can
// score {weights} x {KV} against one reference. kv_spec is the config's KV part (the config's
// spec is then "LABEL+KV"); file_bytes and model_sha256 identify the file, weight_bytes is what
// its tensors hold, weight_type the stored type holding most of those bytes.
constexpr std::string_view kMigrationConfigModels = R"sql(
CREATE TABLE config_models (
  run_id       INTEGER NOT NULL,
  config_id    INTEGER NOT NULL,
  kv_spec      TEXT NOT NULL,
  model_label  TEXT NOT NULL,
  model_path   TEXT NOT NULL,
  model_sha256 TEXT NOT NULL,
  file_bytes   INTEGER NOT NULL,
  weight_bytes INTEGER NOT NULL,
  weight_type  TEXT NOT NULL,
  PRIMARY KEY (run_id, config_id),
  FOREIGN KEY (run_id, config_id) REFERENCES run_configs(run_id, config_id) ON DELETE CASCADE
);
)sql";

// Machine load per run (docs/gates.md, "How latency is gated"): what else ran beside it, so a
// gate compares latency between two runs only when both had the machine to themselves. NULL: not
// recorded (a run made before, or an invocation killed before it could record it).
constexpr std::string_view kMigrationRunLoad = R"sql(
ALTER TABLE runs ADD COLUMN load_avg_start REAL;
ALTER TABLE runs ADD COLUMN load_avg_max REAL;
ALTER TABLE runs ADD COLUMN cpu_seconds REAL;
ALTER TABLE runs ADD COLUMN wall_seconds REAL;
ALTER TABLE runs ADD COLUMN cores INTEGER;
)sql";

// Answers a person can read (docs/schema.md "Stored answers"): every turn's greedy answer as
// text, its length in tokens and the token index of its first divergence from the reference
// config's answer, so a divergence rate can be looked at answer by answer.
constexpr std::string_view kMigrationAnswers = R"sql(
ALTER TABLE turn_metrics ADD COLUMN answer TEXT;
ALTER TABLE turn_metrics ADD COLUMN answer_tokens INTEGER;
ALTER TABLE turn_metrics ADD COLUMN answer_divergence INTEGER;
ALTER TABLE items ADD COLUMN gold_answer TEXT;
)sql";

// Configs as the user typed them (docs/schema.md, run_configs.label): `q4_0` beside the canonical
// spec `q4_0:rot=wht/q4_0:rot=wht` the results are keyed by, so tables show what the user asked
// for. NULL (a run made before): shown by its canonical spec.
constexpr std::string_view kMigrationConfigLabels = R"sql(
ALTER TABLE run_configs ADD COLUMN label TEXT;
)sql";

// Quality by position (docs/schema.md "Position buckets", issue 32): per turn of an item under a
// config, the sums over its scored tokens in each bucket of absolute positions [position_from,
// position_to) (NULL: open-ended), so a curve of KLD against position adds up exactly over
// turns, items and shards. Only buckets holding a token have a row.
constexpr std::string_view kMigrationPositionMetrics = R"sql(
CREATE TABLE position_metrics (
  item_id       INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
  config_id     INTEGER NOT NULL REFERENCES configs(id),
  turn_index    INTEGER NOT NULL,
  position_from INTEGER NOT NULL CHECK (position_from >= 0),
  position_to   INTEGER CHECK (position_to IS NULL OR position_to > position_from),
  scored_tokens INTEGER NOT NULL CHECK (scored_tokens > 0),
  kld_sum       REAL NOT NULL,
  delta_p_sum   REAL NOT NULL,
  same_top1     INTEGER NOT NULL,
  PRIMARY KEY (item_id, config_id, turn_index, position_from)
);
)sql";

// Tamper evidence (docs/schema.md "Row digests", issue 40): every row's digest of its values, and
// per run the seal over its items' rows (their count and the sum of their digests). The values are
// computed in C++ (results/row_digest.h): Store::migrate seals every row a file held before this.
constexpr std::string_view kMigrationRowDigests = R"sql(
ALTER TABLE runs ADD COLUMN item_rows INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN item_rows_digest INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN row_digest INTEGER;
ALTER TABLE configs ADD COLUMN row_digest INTEGER;
ALTER TABLE run_configs ADD COLUMN row_digest INTEGER;
ALTER TABLE items ADD COLUMN row_digest INTEGER;
ALTER TABLE item_metrics ADD COLUMN row_digest INTEGER;
ALTER TABLE turn_metrics ADD COLUMN row_digest INTEGER;
ALTER TABLE token_class_metrics ADD COLUMN row_digest INTEGER;
ALTER TABLE latency_samples ADD COLUMN row_digest INTEGER;
ALTER TABLE kernel_benchmarks ADD COLUMN row_digest INTEGER;
ALTER TABLE gate_decisions ADD COLUMN row_digest INTEGER;
ALTER TABLE run_plans ADD COLUMN row_digest INTEGER;
ALTER TABLE run_plan_items ADD COLUMN row_digest INTEGER;
ALTER TABLE run_merges ADD COLUMN row_digest INTEGER;
ALTER TABLE config_endpoints ADD COLUMN row_digest INTEGER;
ALTER TABLE item_failures ADD COLUMN row_digest INTEGER;
ALTER TABLE load_replays ADD COLUMN row_digest INTEGER;
ALTER TABLE load_requests ADD COLUMN row_digest INTEGER;
ALTER TABLE capacity_predictions ADD COLUMN row_digest INTEGER;
ALTER TABLE config_models ADD COLUMN row_digest INTEGER;
ALTER TABLE position_metrics ADD COLUMN row_digest INTEGER;
)sql";

// Latency that load does not move (docs/gates.md, "How latency is gated"): per turn TTFT and
// TPOT in CPU time of the work, per run the calibration workload as text and per item its CPU
// times just around the item, so the gate can compare latency between runs made under different
// machine load. NULL: not measured (engine mode, a GPU backend, or a run made before).
constexpr std::string_view kMigrationCalibration = R"sql(
ALTER TABLE turn_metrics ADD COLUMN ttft_cpu_ms REAL;
ALTER TABLE turn_metrics ADD COLUMN tpot_cpu_ms REAL;
ALTER TABLE runs ADD COLUMN calibration TEXT;
ALTER TABLE items ADD COLUMN calibration_prefill_ms REAL;
ALTER TABLE items ADD COLUMN calibration_decode_ms REAL;
)sql";

// Append only; a released migration is never edited or renumbered.
constexpr std::string_view kMigrations[] = {kMigration1,       kMigrationShardedRuns, kMigrationEngineMode,
                                             kMigrationConfigModels, kMigrationRunLoad, kMigrationAnswers,
                                             kMigrationConfigLabels, kMigrationPositionMetrics, kMigrationRowDigests,
                                             kMigrationCalibration};

}  // namespace

std::span<const std::string_view> schema_migrations() { return kMigrations; }

}  // namespace kvgate::results
