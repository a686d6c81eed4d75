#include "results/store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "results/row_digest.h"
#include "results/schema.h"
#include "results/store_columns.h"

namespace kvgate::results {

namespace {

// The schema's CHECK keeps the column to these four words; anything else is a damaged file.
RunStatus parse_run_status(const std::string& text, const std::string& run_id) {
  for (const RunStatus st : {RunStatus::running, RunStatus::complete, RunStatus::failed, RunStatus::interrupted})
    if (text == run_status_name(st)) return st;
  throw_input_error("run " + run_id + " has an unknown status '" + text + "' (a damaged results database?)");
}

int read_user_version(Connection& c) {
  Statement s(c, "PRAGMA user_version");
  s.step();
  return static_cast<int>(s.column_int(0));
}



const DigestedTable& runs_table() { return digested_table("runs"); }

// The runs row's columns (row_digest.h's order) and its item count after them.
std::string run_select() {
  return "SELECT " + digest_columns(runs_table(), "r") +
         ", (SELECT COUNT(DISTINCT i.id) FROM items i JOIN item_metrics m ON m.item_id = i.id WHERE i.run_id = r.id) "
         "FROM runs r";
}

RunRecord read_run(Connection& c, const Statement& s) {
  const DigestedTable& t = runs_table();
  check_row(c, s, 0, t, s.column_int(0));
  auto at = [&](std::string_view column) { return static_cast<int>(column_index(t, column)); };
  RunRecord r;
  r.id = s.column_int(at("id"));
  r.status = parse_run_status(s.column_text(at("status")), std::to_string(r.id));
  r.started_at = s.column_text(at("started_at"));
  r.finished_at = s.column_text(at("finished_at"));
  r.info.command = s.column_text(at("command"));
  r.info.git_sha = s.column_text(at("git_sha"));
  r.info.build_flags = s.column_text(at("build_flags"));
  r.info.host = s.column_text(at("host"));
  r.info.cpu = s.column_text(at("cpu"));
  r.info.gpu = s.column_text(at("gpu"));
  r.info.backend = s.column_text(at("backend"));
  r.info.model_path = s.column_text(at("model_path"));
  r.info.model_sha256 = s.column_text(at("model_sha256"));
  r.info.suite_name = s.column_text(at("suite_name"));
  r.info.suite_hash = s.column_text(at("suite_hash"));
  r.info.seed = s.column_int(at("seed"));
  r.info.threads = s.column_int(at("threads"));
  r.info.kvgate_version = s.column_text(at("kvgate_version"));
  r.info.calibration = s.column_text(at("calibration"));  // NULL: not calibrated
  r.items = s.column_int(static_cast<int>(t.columns.size()) + 1);
  const int load = at("load_avg_start");
  bool known = true;
  for (int i = load; i < load + 5; ++i) known = known && !s.is_null(i);
  if (known)
    r.load = RunLoad{s.column_double(load), s.column_double(load + 1), s.column_double(load + 2), s.column_double(load + 3),
                     s.column_int(load + 4)};
  return r;
}

}  // namespace

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

namespace {

// SQLite keeps a database's journal beside it as FILE-wal, FILE-shm or FILE-journal: a name with no
// room for those is refused before SQLite creates the file itself.
void check_side_file_names(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  const long most = ::pathconf(std::filesystem::path(path).parent_path().empty()
                                   ? "."
                                   : std::filesystem::path(path).parent_path().c_str(),
                               _PC_NAME_MAX);
  const size_t limit = most > 0 ? static_cast<size_t>(most) : 255;
  if (name.size() + std::strlen("-journal") > limit)
    throw_input_error(echo_user_text(path) + ": the file name is " + std::to_string(name.size()) +
                      " bytes; SQLite keeps its journal beside it under the name plus \"-journal\", which must fit the "
                      "file system's " + std::to_string(limit) + "-byte limit");
}

}  // namespace

Store Store::open(const std::string& path, Mode mode) {
  struct stat st {};
  const bool exists = !path.empty() && ::stat(path.c_str(), &st) == 0;
  // SQLite would happily open a directory or a device, or treat an empty path as a temporary
  // database; name the real problem instead.
  if (path.empty()) throw_input_error("the results database path is empty");
  if (exists && !S_ISREG(st.st_mode))
    throw_input_error(path + (S_ISDIR(st.st_mode) ? ": is a directory, not a results database"
                                                  : ": not a regular file (a results database is one)"));
  if (mode == Mode::existing || mode == Mode::update) {
    if (!exists) throw_input_error(path + ": no such results database");
    // A database this process may not write (its file, or the directory SQLite keeps its WAL
    // side files in) is still readable: it is opened read-only instead of failing on the side
    // files. One that is to be written must be writable.
    const std::string dir = std::filesystem::path(path).parent_path().string();
    const bool writable = ::access(path.c_str(), W_OK) == 0 && ::access(dir.empty() ? "." : dir.c_str(), W_OK) == 0;
    if (mode == Mode::update && !writable)
      throw_input_error(path + ": cannot write the results database (the file or its directory is read-only)");
    Store store(writable ? std::make_unique<Connection>(path, false) : Connection::read_only(path));
    store.migrate(false);
    store.check_integrity();
    return store;
  }
  check_side_file_names(path);
  // A file this call creates is removed again when it cannot be made a database (a journal that
  // cannot be written, a full disk): rejected input leaves no empty file behind.
  try {
    Store store(std::make_unique<Connection>(path, true));
    store.migrate(true);
    if (exists) store.check_integrity();
    return store;
  } catch (...) {
    if (!exists)
      for (const char* suffix : {"", "-wal", "-shm", "-journal"}) ::unlink((path + suffix).c_str());
    throw;
  }
}

bool Store::read_only() const { return connection_->is_read_only(); }

void Store::check_integrity() {
  // quick_check reads every page and checks the b-trees (not index contents against their
  // tables): a damaged page fails here, by name, instead of as numbers read from it. A value
  // changed inside a sound page is the row digests' to find (results/row_digest.h).
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
    check_schema(c);
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
  if (found == latest) {
    check_schema(c);
    return;
  }

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
  check_schema(c);
  // Rows written before digests existed (or before their columns last changed) are sealed as
  // they are now: from here on a change to one is seen (docs/schema.md, "Row digests").
  if (current > 0 && current < kRowDigestsSince) seal_all_rows(c);
  // PRAGMA takes no bound parameters; the value is our own integer constant.
  c.execute_script("PRAGMA user_version = " + std::to_string(latest));
  tx.commit();
}

int Store::schema_version() { return read_user_version(*connection_); }

int64_t Store::begin_run(const RunInfo& i) {
  Transaction tx(*connection_);
  const int64_t id = RowInserter(*connection_, runs_table())
                         .insert_new_id({std::nullopt, "running", now_utc(), std::nullopt, i.command, i.git_sha,
                                         i.build_flags, i.host, i.cpu, i.gpu, i.backend, i.model_path, i.model_sha256,
                                         i.suite_name, i.suite_hash, i.seed, i.threads, i.kvgate_version, std::nullopt,
                                         std::nullopt, std::nullopt, std::nullopt, std::nullopt, int64_t{0}, int64_t{0},
                                         i.calibration.empty() ? SqlValue() : SqlValue(i.calibration)});
  tx.commit();
  return id;
}

void Store::finish_run(int64_t run_id, RunStatus status) {
  if (status == RunStatus::running) throw_internal_error("finish_run with status 'running'");
  const DigestedTable& t = runs_table();
  const bool found = update_row(
      *connection_, t, "id = ?1", {run_id},
      [&](Row& r) {
        r[column_index(t, "status")] = run_status_name(status);
        r[column_index(t, "finished_at")] = now_utc();
      },
      run_id);
  if (!found) throw_internal_error(path() + ": finish_run: no run " + std::to_string(run_id));
}

void Store::resume_run(int64_t run_id) {
  const DigestedTable& t = runs_table();
  const bool found = update_row(
      *connection_, t, "id = ?1", {run_id},
      [&](Row& r) {
        r[column_index(t, "status")] = "running";
        r[column_index(t, "finished_at")] = SqlValue();
      },
      run_id);
  if (!found) throw_input_error(path() + ": no run " + std::to_string(run_id) + " to resume");
}

void Store::record_run_calibration(int64_t run_id, const std::string& calibration) {
  const DigestedTable& t = runs_table();
  const bool found = update_row(
      *connection_, t, "id = ?1", {run_id},
      [&](Row& r) { r[column_index(t, "calibration")] = calibration.empty() ? SqlValue() : SqlValue(calibration); },
      run_id);
  if (!found) throw_internal_error(path() + ": record_run_calibration: no run " + std::to_string(run_id));
}

void Store::record_run_load(int64_t run_id, const std::optional<RunLoad>& load) {
  const DigestedTable& t = runs_table();
  const size_t first = column_index(t, "load_avg_start");
  const bool found = update_row(
      *connection_, t, "id = ?1", {run_id},
      [&](Row& r) {
        const Row values = load ? Row{load->load_avg_start, load->load_avg_max, load->cpu_seconds, load->wall_seconds, load->cores}
                                : Row(5);
        for (size_t k = 0; k < values.size(); ++k) r[first + k] = values[k];
      },
      run_id);
  if (!found) throw_internal_error(path() + ": record_run_load: no run " + std::to_string(run_id));
}

int64_t Store::add_config(const ConfigInfo& config) {
  // Insert-or-select in one transaction so two processes registering the same spec agree.
  const DigestedTable& t = digested_table("configs");
  Transaction tx(*connection_);
  {
    Statement find(*connection_, "SELECT " + digest_columns(t) + " FROM configs WHERE spec = ?1");
    find.bind(1, config.spec);
    if (find.step()) {
      check_row(*connection_, find, 0, t, 0);
      const std::string hash = find.column_text(static_cast<int>(column_index(t, "hash")));
      if (hash != config.hash)
        throw_internal_error(path() + ": config '" + config.spec + "' is stored with hash " + hash + " but now hashes to " +
                             config.hash);
      return find.column_int(static_cast<int>(column_index(t, "id")));  // the read-only transaction rolls back harmlessly
    }
  }
  const int64_t id = RowInserter(*connection_, t).insert_new_id({std::nullopt, config.spec, config.hash, config.bits_per_element});
  tx.commit();
  return id;
}

void Store::attach_config(int64_t run_id, int64_t config_id, ConfigRole role, double kv_bytes_per_token) {
  const DigestedTable& t = digested_table("run_configs");
  const bool found = update_row(
      *connection_, t, "run_id = ?1 AND config_id = ?2", {run_id, config_id},
      [&](Row& r) {
        r[column_index(t, "role")] = config_role_name(role);
        r[column_index(t, "kv_bytes_per_token")] = kv_bytes_per_token;
      },
      run_id);
  if (!found)
    RowInserter(*connection_, t)
        .insert({run_id, config_id, config_role_name(role), kv_bytes_per_token, "full", std::nullopt, std::nullopt});
}

void Store::set_config_label(int64_t run_id, int64_t config_id, const std::string& label) {
  const DigestedTable& t = digested_table("run_configs");
  update_row(
      *connection_, t, "run_id = ?1 AND config_id = ?2", {run_id, config_id},
      [&](Row& r) { r[column_index(t, "label")] = label; }, run_id);
}

void Store::record_config_model(int64_t run_id, int64_t config_id, const ConfigModel& m) {
  upsert_row(*connection_, digested_table("config_models"), "run_id = ?1 AND config_id = ?2", {run_id, config_id},
             {run_id, config_id, m.kv_spec, m.label, m.path, m.sha256, m.file_bytes, m.weight_bytes, m.weight_type},
             run_id);
}

ItemWriter Store::begin_item(int64_t run_id, const ItemInfo& item) {
  const DigestedTable& t = digested_table("items");
  Transaction tx(*connection_);
  ItemRowSeal seal;
  int64_t id = 0;
  {
    // A resumed run revisits items it already has: the row is shared by all its configs.
    Statement find(*connection_, "SELECT " + digest_columns(t) + " FROM items WHERE run_id = ?1 AND item_key = ?2");
    find.bind(1, run_id).bind(2, item.item_key);
    if (find.step()) {
      check_row(*connection_, find, 0, t, run_id);
      const std::string stored_hash = find.column_text(static_cast<int>(column_index(t, "item_hash")));
      if (stored_hash != item.item_hash)
        throw_input_error(path() + ": run " + std::to_string(run_id) + " already holds item '" + item.item_key +
                          "' with different content (hash " + stored_hash + ", now " + item.item_hash + ")");
      id = find.column_int(static_cast<int>(column_index(t, "id")));
    }
  }
  if (id == 0) {
    int64_t digest = 0;
    id = RowInserter(*connection_, t)
             .insert_new_id({std::nullopt, run_id, item.item_key, item.domain, item.evalset_hash, item.item_hash,
                             item.gold_answer, item.calibration ? SqlValue(item.calibration->prefill_ms) : SqlValue(),
                             item.calibration ? SqlValue(item.calibration->decode_ms) : SqlValue()},
                            &digest);
    seal.add(digest);
  }
  // The item is measured now: an earlier failure of it (engine mode) no longer stands.
  Statement cleared(*connection_, "DELETE FROM item_failures WHERE run_id = ?1 AND item_key = ?2");
  cleared.bind(1, run_id).bind(2, item.item_key);
  cleared.run();
  return ItemWriter(*connection_, std::move(tx), run_id, id, seal);
}

void ItemWriter::add_metrics(const ItemMetrics& m) {
  const DigestedTable& t = digested_table("item_metrics");
  seal_.add(RowInserter(connection_, t).insert(record_row(t, item_metrics_fields(), m, {{"item_id", item_row_id_}})));
}

void ItemWriter::add_turn(const TurnMetrics& turn) {
  const DigestedTable& t = digested_table("turn_metrics");
  seal_.add(RowInserter(connection_, t).insert(record_row(t, turn_metrics_fields(), turn, {{"item_id", item_row_id_}})));
}

void ItemWriter::add_token_class(const TokenClassMetrics& c) {
  const DigestedTable& t = digested_table("token_class_metrics");
  seal_.add(RowInserter(connection_, t).insert(record_row(t, token_class_fields(), c, {{"item_id", item_row_id_}})));
}

void ItemWriter::add_latency(const LatencySamples& l) {
  RowInserter samples(connection_, digested_table("latency_samples"));
  for (size_t i = 0; i < l.token_times_ms.size(); ++i)
    seal_.add(samples.insert({item_row_id_, l.config_id, l.turn_index, static_cast<int64_t>(i), l.token_times_ms[i]}));
}

void ItemWriter::commit() {
  add_to_run_seal(connection_, run_id_, seal_);
  transaction_.commit();
}

void Store::add_kernel_benchmark(int64_t run_id, const KernelBenchmark& b) {
  Transaction tx(*connection_);
  RowInserter(*connection_, digested_table("kernel_benchmarks"))
      .insert_new_id({std::nullopt, run_id, b.kernel, b.format, b.backend, b.head_dim, b.tokens, b.iterations,
                      b.ns_per_iteration, b.bytes_per_second, b.bound_bytes_per_second});
  tx.commit();
}

int64_t Store::add_gate_decision(const GateDecision& d) {
  Transaction tx(*connection_);
  const int64_t id = RowInserter(*connection_, digested_table("gate_decisions"))
                         .insert_new_id({std::nullopt, d.baseline_run_id, d.candidate_run_id, d.config_id, d.check_name,
                                         d.metric, d.passed, d.baseline_value, d.candidate_value, d.delta, d.ci_low,
                                         d.ci_high, d.threshold, d.detail, now_utc()});
  tx.commit();
  return id;
}

std::vector<RunRecord> Store::list_runs() {
  Statement s(*connection_, run_select() + " ORDER BY r.id");
  std::vector<RunRecord> runs;
  while (s.step()) runs.push_back(read_run(*connection_, s));
  return runs;
}

std::optional<RunRecord> Store::find_run(int64_t run_id) {
  Statement s(*connection_, run_select() + " WHERE r.id = ?1");
  s.bind(1, run_id);
  if (!s.step()) return std::nullopt;
  return read_run(*connection_, s);
}

void Store::check_run(int64_t run_id) {
  if (checked_runs_.count(run_id)) return;
  check_run_rows(*connection_, run_id);
  checked_runs_.insert(run_id);
}

namespace {

std::mutex run_reads_mutex;
std::map<std::pair<std::string, int64_t>, int64_t> run_reads;

}  // namespace

void Store::begin_run_read(const char* table, int64_t run_id) {
  {
    const std::lock_guard<std::mutex> lock(run_reads_mutex);
    ++run_reads[{table, run_id}];
  }
  check_run(run_id);
}

std::map<std::pair<std::string, int64_t>, int64_t> Store::run_table_reads() {
  const std::lock_guard<std::mutex> lock(run_reads_mutex);
  return run_reads;
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
  begin_run_read("run_configs", run_id);
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
  check_run(run_id);
  Statement s(*connection_,
              "SELECT i.item_key, m.config_id FROM items i JOIN item_metrics m ON m.item_id = i.id "
              "WHERE i.run_id = ?1");
  s.bind(1, run_id);
  std::set<std::pair<std::string, int64_t>> out;
  while (s.step()) out.emplace(s.column_text(0), s.column_int(1));
  return out;
}

std::optional<ItemMetrics> Store::item_metrics(int64_t run_id, const std::string& item_key, int64_t config_id) {
  check_run(run_id);
  const DigestedTable& t = digested_table("item_metrics");
  Statement s(*connection_, "SELECT " + digest_columns(t, "m") +
                                " FROM item_metrics m JOIN items i ON i.id = m.item_id "
                                "WHERE i.run_id = ?1 AND i.item_key = ?2 AND m.config_id = ?3");
  s.bind(1, run_id).bind(2, item_key).bind(3, config_id);
  if (!s.step()) return std::nullopt;
  ItemMetrics m;
  read_record(s, 0, t, item_metrics_fields(), m);
  return m;
}

std::vector<RunItemMetrics> Store::run_item_metrics(int64_t run_id) {
  begin_run_read("item_metrics", run_id);
  const DigestedTable& t = digested_table("item_metrics");
  Statement s(*connection_, run_rows_select(t, "t.config_id"));
  s.bind(1, run_id);
  std::vector<RunItemMetrics> out;
  while (s.step()) {
    RunItemMetrics r{s.column_text(0), s.column_text(1), {}};
    read_record(s, 2, t, item_metrics_fields(), r.metrics);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<ItemInfo> Store::run_items(int64_t run_id) {
  begin_run_read("items", run_id);
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
  begin_run_read("turn_metrics", run_id);
  const DigestedTable& t = digested_table("turn_metrics");
  Statement s(*connection_, run_rows_select(t, "t.config_id, t.turn_index"));
  s.bind(1, run_id);
  std::vector<RunTurnMetrics> out;
  while (s.step()) {
    RunTurnMetrics r{s.column_text(0), s.column_text(1), {}};
    read_record(s, 2, t, turn_metrics_fields(), r.turn);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<GateDecision> Store::gate_decisions_for_candidate(int64_t candidate_run_id) {
  // Checked row by row, not as the whole run: `--baseline passing` reads the decisions of every run.
  const DigestedTable& t = digested_table("gate_decisions");
  Statement s(*connection_, "SELECT " + digest_columns(t) + " FROM gate_decisions WHERE candidate_run_id = ?1 ORDER BY id");
  s.bind(1, candidate_run_id);
  auto at = [&](std::string_view column) { return static_cast<int>(column_index(t, column)); };
  std::vector<GateDecision> out;
  while (s.step()) {
    check_row(*connection_, s, 0, t, candidate_run_id);
    GateDecision d;
    d.baseline_run_id = s.column_int(at("baseline_run_id"));
    d.candidate_run_id = s.column_int(at("candidate_run_id"));
    d.config_id = s.column_optional_int(at("config_id"));
    d.check_name = s.column_text(at("check_name"));
    d.metric = s.column_text(at("metric"));
    d.passed = s.column_int(at("passed")) != 0;
    d.baseline_value = s.column_double(at("baseline_value"));
    d.candidate_value = s.column_double(at("candidate_value"));
    d.delta = s.column_double(at("delta"));
    d.ci_low = s.column_double(at("ci_low"));
    d.ci_high = s.column_double(at("ci_high"));
    d.threshold = s.column_double(at("threshold"));
    d.detail = s.column_text(at("detail"));
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
  upsert_row(*connection_, digested_table("run_plans"), "run_id = ?1", {run_id},
             {run_id, plan.plan_hash, plan.plan, plan.plan_items, plan.shard_index, plan.shard_count,
              plan.shard_index ? SqlValue(plan.shard_origin) : SqlValue()},
             run_id);
  RowInserter item(*connection_, digested_table("run_plan_items"));
  for (const PlanItem& p : items) item.insert({run_id, p.position, p.item_key, p.shard_index});
  tx.commit();
}

std::optional<RunPlan> Store::run_plan(int64_t run_id) {
  check_run(run_id);
  Statement s(*connection_,
              "SELECT plan_hash, plan, plan_items, shard_index, shard_count, shard_origin FROM run_plans WHERE run_id = ?1");
  s.bind(1, run_id);
  if (!s.step()) return std::nullopt;
  return RunPlan{s.column_text(0), s.column_text(1), s.column_int(2), s.column_optional_int(3), s.column_optional_int(4),
                 s.column_text(5)};
}

std::vector<PlanItem> Store::run_plan_items(int64_t run_id) {
  check_run(run_id);
  Statement s(*connection_, "SELECT position, item_key, shard_index FROM run_plan_items WHERE run_id = ?1 ORDER BY position");
  s.bind(1, run_id);
  std::vector<PlanItem> out;
  while (s.step()) out.push_back({s.column_int(0), s.column_text(1), s.column_int(2)});
  return out;
}

std::vector<MergeSource> Store::merge_sources(int64_t run_id) {
  check_run(run_id);
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
