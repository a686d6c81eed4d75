#include "results/store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <limits>
#include <thread>

#include "core/error.h"
#include "results/schema.h"

namespace kvgate::results {

namespace {

// The schema's CHECK keeps the column to these four words; anything else is a damaged file.
RunStatus parse_run_status(const std::string& text, const std::string& run_id) {
  for (const RunStatus st : {RunStatus::running, RunStatus::complete, RunStatus::failed, RunStatus::interrupted})
    if (text == run_status_name(st)) return st;
  throw_input_error("run " + run_id + " has an unknown status '" + text + "' (a damaged results database?)");
}

std::string now_utc() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(millis));
  return buf;
}

int read_user_version(Connection& c) {
  Statement s(c, "PRAGMA user_version");
  s.step();
  return static_cast<int>(s.column_int(0));
}



constexpr const char* kRunColumns =
    "r.id, r.status, r.started_at, r.finished_at, r.command, r.git_sha, r.build_flags, r.host, r.cpu, r.gpu, "
    "r.backend, r.model_path, r.model_sha256, r.suite_name, r.suite_hash, r.seed, r.threads, r.kvgate_version, "
    "(SELECT COUNT(DISTINCT i.id) FROM items i JOIN item_metrics m ON m.item_id = i.id WHERE i.run_id = r.id), "
    "r.load_avg_start, r.load_avg_max, r.cpu_seconds, r.wall_seconds, r.cores, r.calibration";

RunRecord read_run(const Statement& s) {
  RunRecord r;
  r.id = s.column_int(0);
  r.status = parse_run_status(s.column_text(1), s.column_text(0));
  r.started_at = s.column_text(2);
  r.finished_at = s.column_text(3);
  r.info.command = s.column_text(4);
  r.info.git_sha = s.column_text(5);
  r.info.build_flags = s.column_text(6);
  r.info.host = s.column_text(7);
  r.info.cpu = s.column_text(8);
  r.info.gpu = s.column_text(9);
  r.info.backend = s.column_text(10);
  r.info.model_path = s.column_text(11);
  r.info.model_sha256 = s.column_text(12);
  r.info.suite_name = s.column_text(13);
  r.info.suite_hash = s.column_text(14);
  r.info.seed = s.column_int(15);
  r.info.threads = s.column_int(16);
  r.info.kvgate_version = s.column_text(17);
  r.items = s.column_int(18);
  if (!s.is_null(19) && !s.is_null(20) && !s.is_null(21) && !s.is_null(22) && !s.is_null(23))
    r.load = RunLoad{s.column_double(19), s.column_double(20), s.column_double(21), s.column_double(22), s.column_int(23)};
  r.info.calibration = s.column_text(24);
  return r;
}

}  // namespace

std::string resolve_db_path(const std::string& db_flag) {
  if (!db_flag.empty()) return db_flag;
  const char* env = std::getenv("KVGATE_DB");
  if (env && *env) return env;
  return "./kvgate.db";
}

const char* config_role_name(ConfigRole r) { return r == ConfigRole::reference ? "reference" : "candidate"; }

const char* run_status_name(RunStatus s) {
  switch (s) {
    case RunStatus::running: return "running";
    case RunStatus::complete: return "complete";
    case RunStatus::failed: return "failed";
    case RunStatus::interrupted: return "interrupted";
  }
  return "failed";
}

Store Store::open(const std::string& path, Mode mode) {
  if (mode == Mode::existing) {
    // SQLite would happily open a directory or treat an empty path as a temporary database;
    // a read-only command should name the real problem instead.
    struct stat st {};
    if (path.empty() || ::stat(path.c_str(), &st) != 0)
      throw_input_error(path + ": no such results database");
    if (!S_ISREG(st.st_mode)) throw_input_error(path + ": not a regular file");
    // A database this process may not write (its file, or the directory SQLite keeps its WAL
    // side files in) is still readable: it is opened read-only instead of failing on the side
    // files.
    const std::string dir = std::filesystem::path(path).parent_path().string();
    const bool writable = ::access(path.c_str(), W_OK) == 0 && ::access(dir.empty() ? "." : dir.c_str(), W_OK) == 0;
    Store store(writable ? std::make_unique<Connection>(path, false) : Connection::read_only(path));
    store.migrate(false);
    store.check_integrity();
    return store;
  }
  Store store(std::make_unique<Connection>(path, true));
  store.migrate(true);
  return store;
}

bool Store::read_only() const { return connection_->is_read_only(); }

void Store::check_integrity() {
  // quick_check reads every page and checks the b-trees (not index contents against their
  // tables): a damaged page fails here, by name, instead of as numbers read from it.
  Statement s(*connection_, "PRAGMA quick_check(3)");
  std::string problems;
  while (s.step()) {
    std::string row = s.column_text(0);
    if (row == "ok") return;
    std::replace(row.begin(), row.end(), '\n', ' ');  // one line per error message
    problems += (problems.empty() ? "" : "; ") + echo_user_text(row, 200);
  }
  throw_input_error(connection_->path() + ": damaged results database (SQLite quick_check: " +
                    (problems.empty() ? std::string("no result") : problems) + ")");
}

void Store::migrate(bool create) {
  Connection& c = *connection_;
  // The first statement that reads the file: a non-database fails here, as an input error.
  const int found = read_user_version(c);
  const int latest = latest_schema_version();
  if (found < 0)
    throw_input_error(c.path() + ": not a kvgate results database (schema version " + std::to_string(found) +
                      "; kvgate's are 1.." + std::to_string(latest) + ")");
  if (found > latest)
    throw_input_error(c.path() + ": results schema version " + std::to_string(found) +
                      " is newer than this kvgate understands (" + std::to_string(latest) +
                      "); use a newer kvgate");
  if (!create && found == 0)
    throw_input_error(c.path() + ": not a kvgate results database (schema version 0)");
  if (c.is_read_only()) {
    if (found < latest)
      throw_input_error(c.path() + ": results schema version " + std::to_string(found) + " is older than this kvgate's (" +
                        std::to_string(latest) + ") and the database is read-only here; open it once where it can be "
                        "written (any kvgate command that reads it upgrades it), then read it here");
    return;
  }
  c.execute_script("PRAGMA foreign_keys = ON");
  // WAL lets readers (runs list, reports) proceed while a run writes; NORMAL sync is safe in
  // WAL: a crash can lose the last transactions, never corrupt or half-apply one.
  // Switching a new file to WAL needs an exclusive lock, and SQLite answers BUSY at once (not
  // through the busy handler) while a second process is creating the same file; retry for as
  // long as the busy timeout would have waited.
  for (int attempt = 0;; ++attempt) {
    const int rc = c.execute_busy_aware("PRAGMA journal_mode = WAL");
    if (rc == 0) break;
    if (attempt * 20 >= kBusyTimeoutMs)
      throw_environment_error(c.path() + ": database stayed locked while switching to WAL");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  c.execute_script("PRAGMA synchronous = NORMAL");
  if (found == latest) return;

  Transaction tx(c);
  // Another process may have migrated between our first read and taking the write lock.
  const int current = read_user_version(c);
  if (current > latest)
    throw_input_error(c.path() + ": results schema version " + std::to_string(current) +
                      " is newer than this kvgate understands (" + std::to_string(latest) + ")");
  const auto migrations = schema_migrations();
  for (int v = current; v < latest; ++v) {
    try {
      c.execute_script(migrations[v]);
    } catch (const Error& e) {
      // The released migrations apply to every file kvgate wrote at that version; one that does
      // not (a table it creates is already there) holds tables its user_version does not
      // describe: a damaged or foreign file, not a bug here.
      if (e.kind() != ErrorKind::internal) throw;
      throw_input_error(c.path() + ": its tables do not match its results schema version " + std::to_string(current) +
                        " (upgrading to " + std::to_string(v + 1) + " failed: " + e.what() + ")");
    }
  }
  // PRAGMA takes no bound parameters; the value is our own integer constant.
  c.execute_script("PRAGMA user_version = " + std::to_string(latest));
  tx.commit();
}

int Store::schema_version() { return read_user_version(*connection_); }

int64_t Store::begin_run(const RunInfo& i) {
  Statement s(*connection_,
              "INSERT INTO runs (status, started_at, command, git_sha, build_flags, host, cpu, gpu, backend, "
              "model_path, model_sha256, suite_name, suite_hash, seed, threads, kvgate_version, calibration) "
              "VALUES ('running', ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16) RETURNING id");
  s.bind(1, now_utc()).bind(2, i.command).bind(3, i.git_sha).bind(4, i.build_flags).bind(5, i.host);
  s.bind(6, i.cpu).bind(7, i.gpu).bind(8, i.backend).bind(9, i.model_path).bind(10, i.model_sha256);
  s.bind(11, i.suite_name).bind(12, i.suite_hash).bind(13, i.seed).bind(14, i.threads).bind(15, i.kvgate_version);
  if (i.calibration.empty()) s.bind_null(16);
  else s.bind(16, i.calibration);
  s.step();
  return s.column_int(0);
}

void Store::finish_run(int64_t run_id, RunStatus status) {
  if (status == RunStatus::running) throw_internal_error("finish_run with status 'running'");
  Statement s(*connection_, "UPDATE runs SET status = ?1, finished_at = ?2 WHERE id = ?3 RETURNING id");
  s.bind(1, run_status_name(status)).bind(2, now_utc()).bind(3, run_id);
  if (!s.step()) throw_internal_error(path() + ": finish_run: no run " + std::to_string(run_id));
}

void Store::resume_run(int64_t run_id) {
  Statement s(*connection_,
              "UPDATE runs SET status = 'running', finished_at = NULL WHERE id = ?1 RETURNING status");
  s.bind(1, run_id);
  if (!s.step()) throw_input_error(path() + ": no run " + std::to_string(run_id) + " to resume");
}

void Store::record_run_calibration(int64_t run_id, const std::string& calibration) {
  Statement s(*connection_, "UPDATE runs SET calibration = ?1 WHERE id = ?2 RETURNING id");
  if (calibration.empty()) s.bind_null(1);
  else s.bind(1, calibration);
  s.bind(2, run_id);
  if (!s.step()) throw_internal_error(path() + ": record_run_calibration: no run " + std::to_string(run_id));
}

void Store::record_run_load(int64_t run_id, const std::optional<RunLoad>& load) {
  Statement s(*connection_,
              "UPDATE runs SET load_avg_start = ?1, load_avg_max = ?2, cpu_seconds = ?3, wall_seconds = ?4, cores = ?5 "
              "WHERE id = ?6 RETURNING id");
  if (load) {
    s.bind(1, load->load_avg_start).bind(2, load->load_avg_max).bind(3, load->cpu_seconds).bind(4, load->wall_seconds);
    s.bind(5, load->cores);
  } else {
    for (int i = 1; i <= 5; ++i) s.bind_null(i);
  }
  s.bind(6, run_id);
  if (!s.step()) throw_internal_error(path() + ": record_run_load: no run " + std::to_string(run_id));
}

int64_t Store::add_config(const ConfigInfo& config) {
  // Insert-or-select in one transaction so two processes registering the same spec agree.
  Transaction tx(*connection_);
  {
    Statement find(*connection_, "SELECT id, hash FROM configs WHERE spec = ?1");
    find.bind(1, config.spec);
    if (find.step()) {
      if (find.column_text(1) != config.hash)
        throw_internal_error(path() + ": config '" + config.spec + "' is stored with hash " + find.column_text(1) +
                             " but now hashes to " + config.hash);
      const int64_t id = find.column_int(0);
      return id;  // the read-only transaction rolls back harmlessly
    }
  }
  Statement insert(*connection_, "INSERT INTO configs (spec, hash, bits_per_element) VALUES (?1, ?2, ?3) RETURNING id");
  insert.bind(1, config.spec).bind(2, config.hash).bind(3, config.bits_per_element);
  insert.step();
  const int64_t id = insert.column_int(0);
  insert.reset();
  tx.commit();
  return id;
}

void Store::attach_config(int64_t run_id, int64_t config_id, ConfigRole role, double kv_bytes_per_token) {
  Statement s(*connection_,
              "INSERT INTO run_configs (run_id, config_id, role, kv_bytes_per_token) VALUES (?1, ?2, ?3, ?4) "
              "ON CONFLICT (run_id, config_id) DO UPDATE SET role = excluded.role, "
              "kv_bytes_per_token = excluded.kv_bytes_per_token");
  s.bind(1, run_id).bind(2, config_id).bind(3, config_role_name(role)).bind(4, kv_bytes_per_token);
  s.run();
}

void Store::set_config_label(int64_t run_id, int64_t config_id, const std::string& label) {
  Statement s(*connection_, "UPDATE run_configs SET label = ?1 WHERE run_id = ?2 AND config_id = ?3");
  s.bind(1, label).bind(2, run_id).bind(3, config_id);
  s.run();
}

void Store::record_config_model(int64_t run_id, int64_t config_id, const ConfigModel& m) {
  Statement s(*connection_,
              "INSERT OR REPLACE INTO config_models (run_id, config_id, kv_spec, model_label, model_path, model_sha256, "
              "file_bytes, weight_bytes, weight_type) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
  s.bind(1, run_id).bind(2, config_id).bind(3, m.kv_spec).bind(4, m.label).bind(5, m.path).bind(6, m.sha256);
  s.bind(7, m.file_bytes).bind(8, m.weight_bytes).bind(9, m.weight_type);
  s.run();
}

ItemWriter Store::begin_item(int64_t run_id, const ItemInfo& item) {
  Transaction tx(*connection_);
  // A resumed run revisits items it already has: the row is shared by all its configs.
  Statement upsert(*connection_,
                   "INSERT INTO items (run_id, item_key, domain, evalset_hash, item_hash, gold_answer, "
                   "calibration_prefill_ms, calibration_decode_ms) "
                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (run_id, item_key) DO NOTHING");
  upsert.bind(1, run_id).bind(2, item.item_key).bind(3, item.domain).bind(4, item.evalset_hash).bind(5, item.item_hash);
  upsert.bind(6, item.gold_answer);
  if (item.calibration) upsert.bind(7, item.calibration->prefill_ms).bind(8, item.calibration->decode_ms);
  else upsert.bind_null(7).bind_null(8);
  upsert.run();
  Statement find(*connection_, "SELECT id, item_hash FROM items WHERE run_id = ?1 AND item_key = ?2");
  find.bind(1, run_id).bind(2, item.item_key);
  if (!find.step()) throw_internal_error(path() + ": item row vanished inside its own transaction");
  if (find.column_text(1) != item.item_hash)
    throw_input_error(path() + ": run " + std::to_string(run_id) + " already holds item '" + item.item_key +
                      "' with different content (hash " + find.column_text(1) + ", now " + item.item_hash + ")");
  const int64_t id = find.column_int(0);
  // The item is measured now: an earlier failure of it (engine mode) no longer stands.
  Statement cleared(*connection_, "DELETE FROM item_failures WHERE run_id = ?1 AND item_key = ?2");
  cleared.bind(1, run_id).bind(2, item.item_key);
  cleared.run();
  return ItemWriter(*connection_, std::move(tx), id);
}

void ItemWriter::add_metrics(const ItemMetrics& m) {
  Statement s(connection_,
              "INSERT INTO item_metrics (item_id, config_id, scored_tokens, kld_mean, kld_max, kld_p99, delta_p_mean, "
              "delta_p_rms, top1_agreement, nll_mean, nll_ref_mean, generated_tokens, first_divergence, "
              "exact_match_ref, exact_match_gold) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)");
  s.bind(1, item_row_id_).bind(2, m.config_id).bind(3, m.scored_tokens).bind(4, m.kld_mean).bind(5, m.kld_max);
  s.bind(6, m.kld_p99).bind(7, m.delta_p_mean).bind(8, m.delta_p_rms).bind(9, m.same_top1);
  s.bind(10, m.nll_mean).bind(11, m.nll_ref_mean).bind(12, m.generated_tokens).bind(13, m.first_divergence);
  s.bind(14, m.exact_match_ref).bind(15, m.exact_match_gold);
  s.run();
}

void ItemWriter::add_turn(const TurnMetrics& t) {
  Statement s(connection_,
              "INSERT INTO turn_metrics (item_id, config_id, turn_index, context_tokens, scored_tokens, kld_mean, "
              "top1_agreement, ttft_ms, tpot_ms, prompt_tokens, cached_tokens, answer, answer_tokens, answer_divergence, "
              "ttft_cpu_ms, tpot_cpu_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)");
  s.bind(1, item_row_id_).bind(2, t.config_id).bind(3, t.turn_index).bind(4, t.context_tokens);
  s.bind(5, t.scored_tokens).bind(6, t.kld_mean).bind(7, t.same_top1).bind(8, t.ttft_ms).bind(9, t.tpot_ms);
  s.bind(10, t.prompt_tokens).bind(11, t.cached_tokens);
  s.bind(12, t.answer).bind(13, t.answer_tokens).bind(14, t.answer_divergence);
  s.bind(15, t.ttft_cpu_ms).bind(16, t.tpot_cpu_ms);
  s.run();
}

void ItemWriter::add_token_class(const TokenClassMetrics& c) {
  Statement s(connection_,
              "INSERT INTO token_class_metrics (item_id, config_id, token_class, scored_tokens, kld_sum, "
              "delta_p_sum, same_top1) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  s.bind(1, item_row_id_).bind(2, c.config_id).bind(3, c.token_class).bind(4, c.scored_tokens);
  s.bind(5, c.kld_sum).bind(6, c.delta_p_sum).bind(7, c.same_top1);
  s.run();
}

void ItemWriter::add_latency(const LatencySamples& l) {
  Statement s(connection_,
              "INSERT INTO latency_samples (item_id, config_id, turn_index, token_index, t_ms) "
              "VALUES (?1, ?2, ?3, ?4, ?5)");
  for (size_t i = 0; i < l.token_times_ms.size(); ++i) {
    s.reset();
    s.bind(1, item_row_id_).bind(2, l.config_id).bind(3, l.turn_index).bind(4, static_cast<int64_t>(i));
    s.bind(5, l.token_times_ms[i]);
    s.run();
  }
}

void ItemWriter::commit() { transaction_.commit(); }

void Store::add_kernel_benchmark(int64_t run_id, const KernelBenchmark& b) {
  Statement s(*connection_,
              "INSERT INTO kernel_benchmarks (run_id, kernel, format, backend, head_dim, tokens, iterations, "
              "ns_per_iteration, bytes_per_second, bound_bytes_per_second) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
  s.bind(1, run_id).bind(2, b.kernel).bind(3, b.format).bind(4, b.backend).bind(5, b.head_dim).bind(6, b.tokens);
  s.bind(7, b.iterations).bind(8, b.ns_per_iteration).bind(9, b.bytes_per_second).bind(10, b.bound_bytes_per_second);
  s.run();
}

int64_t Store::add_gate_decision(const GateDecision& d) {
  Statement s(*connection_,
              "INSERT INTO gate_decisions (baseline_run_id, candidate_run_id, config_id, check_name, metric, passed, "
              "baseline_value, candidate_value, delta, ci_low, ci_high, threshold, detail, decided_at) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) RETURNING id");
  s.bind(1, d.baseline_run_id).bind(2, d.candidate_run_id).bind(3, d.config_id).bind(4, d.check_name);
  s.bind(5, d.metric).bind(6, d.passed).bind(7, d.baseline_value).bind(8, d.candidate_value).bind(9, d.delta);
  s.bind(10, d.ci_low).bind(11, d.ci_high).bind(12, d.threshold).bind(13, d.detail).bind(14, now_utc());
  s.step();
  return s.column_int(0);
}

std::vector<RunRecord> Store::list_runs() {
  Statement s(*connection_, std::string("SELECT ") + kRunColumns + " FROM runs r ORDER BY r.id");
  std::vector<RunRecord> runs;
  while (s.step()) runs.push_back(read_run(s));
  return runs;
}

std::optional<RunRecord> Store::find_run(int64_t run_id) {
  Statement s(*connection_, std::string("SELECT ") + kRunColumns + " FROM runs r WHERE r.id = ?1");
  s.bind(1, run_id);
  if (!s.step()) return std::nullopt;
  return read_run(s);
}

RunRecord Store::resolve_run(const std::string& ref) {
  if (ref == "latest") {
    Statement s(*connection_, "SELECT MAX(id) FROM runs");
    s.step();
    if (s.is_null(0)) throw_input_error(path() + ": no runs recorded yet, so there is no 'latest' run");
    return *find_run(s.column_int(0));
  }
  int64_t id = 0;
  bool digits = !ref.empty() && ref.size() <= 18;
  for (char ch : ref) {
    digits = digits && ch >= '0' && ch <= '9';
    if (digits) id = id * 10 + (ch - '0');
  }
  if (!digits) throw_usage_error("run '" + ref + "' is neither a run id nor 'latest'");
  auto run = find_run(id);
  if (!run) throw_input_error(path() + ": no run " + ref);
  return *run;
}

std::vector<RunConfigRecord> Store::run_configs(int64_t run_id) {
  Statement s(*connection_,
              "SELECT c.id, c.spec, c.hash, rc.role, c.bits_per_element, rc.kv_bytes_per_token, rc.kld_estimator, "
              "rc.top_k, cm.kv_spec, cm.model_label, cm.model_path, cm.model_sha256, cm.file_bytes, cm.weight_bytes, "
              "cm.weight_type, rc.label FROM run_configs rc JOIN configs c ON c.id = rc.config_id "
              "LEFT JOIN config_models cm ON cm.run_id = rc.run_id AND cm.config_id = rc.config_id WHERE rc.run_id = ?1 "
              "ORDER BY rc.role DESC, c.spec");
  s.bind(1, run_id);
  std::vector<RunConfigRecord> out;
  while (s.step()) {
    RunConfigRecord r{s.column_int(0),
                      s.column_text(1),
                      s.column_text(2),
                      s.column_text(3) == "reference" ? ConfigRole::reference : ConfigRole::candidate,
                      s.column_double(4),
                      s.column_double(5),
                      s.column_text(6),
                      s.column_optional_int(7),
                      std::nullopt,
                      ""};
    if (!s.is_null(8))
      r.model = ConfigModel{s.column_text(8), s.column_text(9), s.column_text(10), s.column_text(11),
                            s.column_int(12), s.column_int(13), s.column_text(14)};
    r.label = s.is_null(15) ? r.spec : s.column_text(15);
    out.push_back(std::move(r));
  }
  return out;
}

std::set<std::pair<std::string, int64_t>> Store::finished_pairs(int64_t run_id) {
  Statement s(*connection_,
              "SELECT i.item_key, m.config_id FROM items i JOIN item_metrics m ON m.item_id = i.id "
              "WHERE i.run_id = ?1");
  s.bind(1, run_id);
  std::set<std::pair<std::string, int64_t>> out;
  while (s.step()) out.emplace(s.column_text(0), s.column_int(1));
  return out;
}

std::optional<ItemMetrics> Store::item_metrics(int64_t run_id, const std::string& item_key, int64_t config_id) {
  Statement s(*connection_,
              "SELECT m.config_id, m.scored_tokens, m.kld_mean, m.kld_max, m.kld_p99, m.delta_p_mean, m.delta_p_rms, "
              "m.top1_agreement, m.nll_mean, m.nll_ref_mean, m.generated_tokens, m.first_divergence, "
              "m.exact_match_ref, m.exact_match_gold FROM item_metrics m JOIN items i ON i.id = m.item_id "
              "WHERE i.run_id = ?1 AND i.item_key = ?2 AND m.config_id = ?3");
  s.bind(1, run_id).bind(2, item_key).bind(3, config_id);
  if (!s.step()) return std::nullopt;
  ItemMetrics m;
  m.config_id = s.column_int(0);
  m.scored_tokens = s.column_int(1);
  m.kld_mean = s.column_double(2);
  m.kld_max = s.column_double(3);
  m.kld_p99 = s.column_double(4);
  m.delta_p_mean = s.column_double(5);
  m.delta_p_rms = s.column_double(6);
  m.same_top1 = s.column_double(7);
  m.nll_mean = s.column_double(8);
  m.nll_ref_mean = s.column_double(9);
  m.generated_tokens = s.column_optional_int(10);
  m.first_divergence = s.column_optional_int(11);
  if (auto v = s.column_optional_int(12)) m.exact_match_ref = *v != 0;
  if (auto v = s.column_optional_int(13)) m.exact_match_gold = *v != 0;
  return m;
}

namespace {

ItemMetrics read_item_metrics(const Statement& s, int first) {
  ItemMetrics m;
  m.config_id = s.column_int(first);
  m.scored_tokens = s.column_int(first + 1);
  m.kld_mean = s.column_double(first + 2);
  m.kld_max = s.column_double(first + 3);
  m.kld_p99 = s.column_double(first + 4);
  m.delta_p_mean = s.column_double(first + 5);
  m.delta_p_rms = s.column_double(first + 6);
  m.same_top1 = s.column_double(first + 7);
  m.nll_mean = s.column_double(first + 8);
  m.nll_ref_mean = s.column_double(first + 9);
  m.generated_tokens = s.column_optional_int(first + 10);
  m.first_divergence = s.column_optional_int(first + 11);
  if (auto v = s.column_optional_int(first + 12)) m.exact_match_ref = *v != 0;
  if (auto v = s.column_optional_int(first + 13)) m.exact_match_gold = *v != 0;
  return m;
}

}  // namespace

std::vector<RunItemMetrics> Store::run_item_metrics(int64_t run_id) {
  Statement s(*connection_,
              "SELECT i.item_key, i.domain, m.config_id, m.scored_tokens, m.kld_mean, m.kld_max, m.kld_p99, "
              "m.delta_p_mean, m.delta_p_rms, m.top1_agreement, m.nll_mean, m.nll_ref_mean, m.generated_tokens, "
              "m.first_divergence, m.exact_match_ref, m.exact_match_gold FROM item_metrics m "
              "JOIN items i ON i.id = m.item_id WHERE i.run_id = ?1 ORDER BY i.item_key, m.config_id");
  s.bind(1, run_id);
  std::vector<RunItemMetrics> out;
  while (s.step()) out.push_back({s.column_text(0), s.column_text(1), read_item_metrics(s, 2)});
  return out;
}

std::vector<ItemInfo> Store::run_items(int64_t run_id) {
  Statement s(*connection_,
              "SELECT item_key, domain, evalset_hash, item_hash, gold_answer, calibration_prefill_ms, calibration_decode_ms "
              "FROM items WHERE run_id = ?1 ORDER BY item_key");
  s.bind(1, run_id);
  std::vector<ItemInfo> out;
  while (s.step()) {
    ItemInfo info{s.column_text(0), s.column_text(1), s.column_text(2), s.column_text(3)};
    if (!s.is_null(4)) info.gold_answer = s.column_text(4);
    if (!s.is_null(5) && !s.is_null(6)) info.calibration = ItemCalibration{s.column_double(5), s.column_double(6)};
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<RunTurnMetrics> Store::run_turn_metrics(int64_t run_id) {
  Statement s(*connection_,
              "SELECT i.item_key, i.domain, t.config_id, t.turn_index, t.context_tokens, t.scored_tokens, t.kld_mean, "
              "t.top1_agreement, t.ttft_ms, t.tpot_ms, t.prompt_tokens, t.cached_tokens, t.answer, t.answer_tokens, "
              "t.answer_divergence, t.ttft_cpu_ms, t.tpot_cpu_ms FROM turn_metrics t "
              "JOIN items i ON i.id = t.item_id WHERE i.run_id = ?1 ORDER BY i.item_key, t.config_id, t.turn_index");
  s.bind(1, run_id);
  std::vector<RunTurnMetrics> out;
  while (s.step()) {
    RunTurnMetrics r{s.column_text(0), s.column_text(1), {}};
    r.turn = {s.column_int(2),    s.column_int(3),    s.column_int(4),    s.column_int(5),
              s.column_double(6), s.column_double(7), s.column_double(8), s.column_double(9),
              s.column_optional_int(10), s.column_optional_int(11)};
    if (!s.is_null(12)) r.turn.answer = s.column_text(12);
    r.turn.answer_tokens = s.column_optional_int(13);
    r.turn.answer_divergence = s.column_optional_int(14);
    r.turn.ttft_cpu_ms = s.column_double(15);
    r.turn.tpot_cpu_ms = s.column_double(16);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<GateDecision> Store::gate_decisions_for_candidate(int64_t candidate_run_id) {
  Statement s(*connection_,
              "SELECT baseline_run_id, candidate_run_id, config_id, check_name, metric, passed, baseline_value, "
              "candidate_value, delta, ci_low, ci_high, threshold, detail FROM gate_decisions "
              "WHERE candidate_run_id = ?1 ORDER BY id");
  s.bind(1, candidate_run_id);
  std::vector<GateDecision> out;
  while (s.step()) {
    GateDecision d;
    d.baseline_run_id = s.column_int(0);
    d.candidate_run_id = s.column_int(1);
    d.config_id = s.column_optional_int(2);
    d.check_name = s.column_text(3);
    d.metric = s.column_text(4);
    d.passed = s.column_int(5) != 0;
    d.baseline_value = s.column_double(6);
    d.candidate_value = s.column_double(7);
    d.delta = s.column_double(8);
    d.ci_low = s.column_double(9);
    d.ci_high = s.column_double(10);
    d.threshold = s.column_double(11);
    d.detail = s.column_text(12);
    out.push_back(std::move(d));
  }
  return out;
}

void Store::record_plan(int64_t run_id, const RunPlan& plan, const std::vector<PlanItem>& items) {
  Transaction tx(*connection_);
  {
    Statement del(*connection_, "DELETE FROM run_plan_items WHERE run_id = ?1");
    del.bind(1, run_id).run();
  }
  Statement s(*connection_,
              "INSERT INTO run_plans (run_id, plan_hash, plan, plan_items, shard_index, shard_count, shard_origin) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (run_id) DO UPDATE SET plan_hash = excluded.plan_hash, "
              "plan = excluded.plan, plan_items = excluded.plan_items, shard_index = excluded.shard_index, "
              "shard_count = excluded.shard_count, shard_origin = excluded.shard_origin");
  s.bind(1, run_id).bind(2, plan.plan_hash).bind(3, plan.plan).bind(4, plan.plan_items).bind(5, plan.shard_index);
  s.bind(6, plan.shard_count);
  if (plan.shard_index) {
    s.bind(7, plan.shard_origin);
  } else {
    s.bind_null(7);
  }
  s.run();
  Statement item(*connection_, "INSERT INTO run_plan_items (run_id, position, item_key, shard_index) VALUES (?1, ?2, ?3, ?4)");
  for (const PlanItem& p : items) {
    item.reset();
    item.bind(1, run_id).bind(2, p.position).bind(3, p.item_key).bind(4, p.shard_index);
    item.run();
  }
  tx.commit();
}

std::optional<RunPlan> Store::run_plan(int64_t run_id) {
  Statement s(*connection_,
              "SELECT plan_hash, plan, plan_items, shard_index, shard_count, shard_origin FROM run_plans WHERE run_id = ?1");
  s.bind(1, run_id);
  if (!s.step()) return std::nullopt;
  return RunPlan{s.column_text(0), s.column_text(1), s.column_int(2), s.column_optional_int(3), s.column_optional_int(4),
                 s.column_text(5)};
}

std::vector<PlanItem> Store::run_plan_items(int64_t run_id) {
  Statement s(*connection_, "SELECT position, item_key, shard_index FROM run_plan_items WHERE run_id = ?1 ORDER BY position");
  s.bind(1, run_id);
  std::vector<PlanItem> out;
  while (s.step()) out.push_back({s.column_int(0), s.column_text(1), s.column_int(2)});
  return out;
}

std::vector<MergeSource> Store::merge_sources(int64_t run_id) {
  Statement s(*connection_,
              "SELECT shard_index, shard_count, source_db, source_run_id, host, started_at, finished_at, digest "
              "FROM run_merges WHERE run_id = ?1 ORDER BY shard_index");
  s.bind(1, run_id);
  std::vector<MergeSource> out;
  while (s.step())
    out.push_back({s.column_int(0), s.column_int(1), s.column_text(2), s.column_int(3), s.column_text(4), s.column_text(5),
                   s.column_text(6), s.column_text(7)});
  return out;
}

}  // namespace kvgate::results
