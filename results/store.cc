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
  check_row(c, s, 0, t, s.column_int(static_cast<int>(column_index(t, "id"))));
  RunRecord r;
  read_record(s, 0, t, run_fields(), r);
  r.items = s.column_int(static_cast<int>(t.columns.size()) + 1);
  return r;
}

// Changes `columns` of run `run_id`'s row to their values in `run` (the rest of it is unread).
bool update_run(Connection& c, int64_t run_id, const RunRecord& run, std::initializer_list<std::string_view> columns) {
  const DigestedTable& t = runs_table();
  return update_row(c, t, "id = ?1", {run_id}, [&](Row& r) { set_columns(t, run_fields(), run, r, columns); }, run_id);
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
  RunRecord run;
  run.started_at = now_utc();
  run.info = i;
  const DigestedTable& t = runs_table();
  Transaction tx(*connection_);
  const int64_t id = RowInserter(*connection_, t)
                         .insert_new_id(record_row(t, run_fields(), run,
                                                   {{"id", std::nullopt}, {"item_rows", int64_t{0}}, {"item_rows_digest", int64_t{0}}}));
  tx.commit();
  return id;
}

void Store::finish_run(int64_t run_id, RunStatus status) {
  if (status == RunStatus::running) throw_internal_error("finish_run with status 'running'");
  RunRecord run;
  run.status = status;
  run.finished_at = now_utc();
  if (!update_run(*connection_, run_id, run, {"status", "finished_at"}))
    throw_internal_error(path() + ": finish_run: no run " + std::to_string(run_id));
}

void Store::resume_run(int64_t run_id) {
  const RunRecord run;  // running, not finished
  if (!update_run(*connection_, run_id, run, {"status", "finished_at"}))
    throw_input_error(path() + ": no run " + std::to_string(run_id) + " to resume");
}

void Store::record_run_calibration(int64_t run_id, const std::string& calibration) {
  RunRecord run;
  run.info.calibration = calibration;
  if (!update_run(*connection_, run_id, run, {"calibration"}))
    throw_internal_error(path() + ": record_run_calibration: no run " + std::to_string(run_id));
}

void Store::record_run_load(int64_t run_id, const std::optional<RunLoad>& load) {
  RunRecord run;
  run.load = load;
  if (!update_run(*connection_, run_id, run, {"load_avg_start", "load_avg_max", "cpu_seconds", "wall_seconds", "cores"}))
    throw_internal_error(path() + ": record_run_load: no run " + std::to_string(run_id));
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
  RunConfigRecord row;
  row.spec = config.spec;
  row.hash = config.hash;
  row.bits_per_element = config.bits_per_element;
  const int64_t id = RowInserter(*connection_, t).insert_new_id(record_row(t, config_fields(), row, {{"id", std::nullopt}}));
  tx.commit();
  return id;
}

void Store::attach_config(int64_t run_id, int64_t config_id, ConfigRole role, double kv_bytes_per_token) {
  const DigestedTable& t = digested_table("run_configs");
  RunConfigRecord c;  // estimated from every logit; no label yet
  c.config_id = config_id;
  c.role = role;
  c.kv_bytes_per_token = kv_bytes_per_token;
  const bool found = update_row(
      *connection_, t, "run_id = ?1 AND config_id = ?2", {run_id, config_id},
      [&](Row& r) { set_columns(t, run_config_fields(), c, r, {"role", "kv_bytes_per_token"}); }, run_id);
  if (!found) RowInserter(*connection_, t).insert(record_row(t, run_config_fields(), c, {{"run_id", run_id}}));
}

void Store::set_config_label(int64_t run_id, int64_t config_id, const std::string& label) {
  const DigestedTable& t = digested_table("run_configs");
  RunConfigRecord c;
  c.label = label;
  update_row(
      *connection_, t, "run_id = ?1 AND config_id = ?2", {run_id, config_id},
      [&](Row& r) { set_columns(t, run_config_fields(), c, r, {"label"}); }, run_id);
}

void Store::record_config_model(int64_t run_id, int64_t config_id, const ConfigModel& m) {
  const DigestedTable& t = digested_table("config_models");
  upsert_row(*connection_, t, "run_id = ?1 AND config_id = ?2", {run_id, config_id},
             record_row(t, config_model_fields(), m, {{"run_id", run_id}, {"config_id", config_id}}), run_id);
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
             .insert_new_id(record_row(t, item_fields(), item, {{"id", std::nullopt}, {"run_id", run_id}}), &digest);
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
  const DigestedTable& t = digested_table("latency_samples");
  RowInserter samples(connection_, t);
  for (size_t i = 0; i < l.token_times_ms.size(); ++i) {
    const LatencySample sample{l.config_id, l.turn_index, static_cast<int64_t>(i), l.token_times_ms[i]};
    seal_.add(samples.insert(record_row(t, latency_fields(), sample, {{"item_id", item_row_id_}})));
  }
}

void ItemWriter::commit() {
  add_to_run_seal(connection_, run_id_, seal_);
  transaction_.commit();
}

void Store::add_kernel_benchmark(int64_t run_id, const KernelBenchmark& b) {
  const DigestedTable& t = digested_table("kernel_benchmarks");
  Transaction tx(*connection_);
  RowInserter(*connection_, t)
      .insert_new_id(record_row(t, kernel_benchmark_fields(), b, {{"id", std::nullopt}, {"run_id", run_id}}));
  tx.commit();
}

int64_t Store::add_gate_decision(const GateDecision& d) {
  const DigestedTable& t = digested_table("gate_decisions");
  Transaction tx(*connection_);
  const int64_t id =
      RowInserter(*connection_, t)
          .insert_new_id(record_row(t, gate_decision_fields(), d, {{"id", std::nullopt}, {"decided_at", now_utc()}}));
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
  const DigestedTable &configs = digested_table("configs"), &run_configs = digested_table("run_configs"),
                     &models = digested_table("config_models");
  Statement s(*connection_, "SELECT " + digest_columns(configs, "c") + ", " + digest_columns(run_configs, "rc") + ", " +
                                digest_columns(models, "cm") +
                                " FROM run_configs rc JOIN configs c ON c.id = rc.config_id "
                                "LEFT JOIN config_models cm ON cm.run_id = rc.run_id AND cm.config_id = rc.config_id "
                                "WHERE rc.run_id = ?1 ORDER BY rc.role DESC, c.spec");
  s.bind(1, run_id);
  // Each table's columns and its row_digest, one table after the other.
  const int run_config_at = static_cast<int>(configs.columns.size()) + 1;
  const int model_at = run_config_at + static_cast<int>(run_configs.columns.size()) + 1;
  std::vector<RunConfigRecord> out;
  while (s.step()) {
    RunConfigRecord r;
    read_record(s, 0, configs, config_fields(), r);
    read_record(s, run_config_at, run_configs, run_config_fields(), r);
    if (!s.is_null(model_at + static_cast<int>(column_index(models, "run_id")))) {
      r.model.emplace();
      read_record(s, model_at, models, config_model_fields(), *r.model);
    }
    if (r.label.empty()) r.label = r.spec;
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
  return read_run_records(*connection_, digested_table("items"), item_fields(), run_id, "item_key");
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
  std::vector<GateDecision> out;
  while (s.step()) {
    check_row(*connection_, s, 0, t, candidate_run_id);
    GateDecision d;
    read_record(s, 0, t, gate_decision_fields(), d);
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
  const DigestedTable &plans = digested_table("run_plans"), &plan_items = digested_table("run_plan_items");
  upsert_row(*connection_, plans, "run_id = ?1", {run_id}, record_row(plans, run_plan_fields(), plan, {{"run_id", run_id}}),
             run_id);
  RowInserter item(*connection_, plan_items);
  for (const PlanItem& p : items) item.insert(record_row(plan_items, plan_item_fields(), p, {{"run_id", run_id}}));
  tx.commit();
}

std::optional<RunPlan> Store::run_plan(int64_t run_id) {
  check_run(run_id);
  std::vector<RunPlan> plans = read_run_records(*connection_, digested_table("run_plans"), run_plan_fields(), run_id, "run_id");
  if (plans.empty()) return std::nullopt;
  return std::move(plans.front());
}

std::vector<PlanItem> Store::run_plan_items(int64_t run_id) {
  check_run(run_id);
  return read_run_records(*connection_, digested_table("run_plan_items"), plan_item_fields(), run_id, "position");
}

std::vector<MergeSource> Store::merge_sources(int64_t run_id) {
  check_run(run_id);
  return read_run_records(*connection_, digested_table("run_merges"), merge_source_fields(), run_id, "shard_index");
}

}  // namespace kvgate::results
