#include "results/row_digest.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "core/error.h"
#include "core/hash.h"
#include "results/schema.h"

namespace kvgate::results {
namespace {

constexpr ColumnType I = ColumnType::integer, R = ColumnType::real, T = ColumnType::text;

// The rows of run ?1 in a table keyed by item.
constexpr std::string_view kItemRows = "item_id IN (SELECT id FROM items WHERE run_id = ?1)";

std::vector<DigestedTable> make_tables() {
  return {
      {"runs",
       {{"id", I}, {"status", T}, {"started_at", T}, {"finished_at", T}, {"command", T}, {"git_sha", T},
        {"build_flags", T}, {"host", T}, {"cpu", T}, {"gpu", T}, {"backend", T}, {"model_path", T},
        {"model_sha256", T}, {"suite_name", T}, {"suite_hash", T}, {"seed", I}, {"threads", I},
        {"kvgate_version", T}, {"load_avg_start", R}, {"load_avg_max", R}, {"cpu_seconds", R},
        {"wall_seconds", R}, {"cores", I}, {"item_rows", I}, {"item_rows_digest", I}, {"calibration", T}},
       {"id"},
       "id = ?1"},
      {"configs", {{"id", I}, {"spec", T}, {"hash", T}, {"bits_per_element", R}}, {"id", "spec"},
       "id IN (SELECT config_id FROM run_configs WHERE run_id = ?1)"},
      {"run_configs",
       {{"run_id", I}, {"config_id", I}, {"role", T}, {"kv_bytes_per_token", R}, {"kld_estimator", T}, {"top_k", I},
        {"label", T}},
       {"config_id"},
       "run_id = ?1"},
      {"items",
       {{"id", I}, {"run_id", I}, {"item_key", T}, {"domain", T}, {"evalset_hash", T}, {"item_hash", T},
        {"gold_answer", T}, {"calibration_prefill_ms", R}, {"calibration_decode_ms", R}},
       {"id", "item_key"},
       "run_id = ?1",
       true},
      {"item_metrics",
       {{"item_id", I}, {"config_id", I}, {"scored_tokens", I}, {"kld_mean", R}, {"kld_max", R}, {"kld_p99", R},
        {"delta_p_mean", R}, {"delta_p_rms", R}, {"top1_agreement", R}, {"nll_mean", R}, {"nll_ref_mean", R},
        {"generated_tokens", I}, {"first_divergence", I}, {"exact_match_ref", I}, {"exact_match_gold", I}},
       {"item_id", "config_id"},
       kItemRows,
       true},
      {"turn_metrics",
       {{"item_id", I}, {"config_id", I}, {"turn_index", I}, {"context_tokens", I}, {"scored_tokens", I},
        {"kld_mean", R}, {"top1_agreement", R}, {"ttft_ms", R}, {"tpot_ms", R}, {"prompt_tokens", I},
        {"cached_tokens", I}, {"answer", T}, {"answer_tokens", I}, {"answer_divergence", I}, {"ttft_cpu_ms", R},
        {"tpot_cpu_ms", R}},
       {"item_id", "config_id", "turn_index"},
       kItemRows,
       true},
      {"token_class_metrics",
       {{"item_id", I}, {"config_id", I}, {"token_class", T}, {"scored_tokens", I}, {"kld_sum", R},
        {"delta_p_sum", R}, {"same_top1", I}},
       {"item_id", "config_id", "token_class"},
       kItemRows,
       true},
      {"latency_samples",
       {{"item_id", I}, {"config_id", I}, {"turn_index", I}, {"token_index", I}, {"t_ms", R}},
       {"item_id", "config_id", "turn_index", "token_index"},
       kItemRows,
       true},
      {"kernel_benchmarks",
       {{"id", I}, {"run_id", I}, {"kernel", T}, {"format", T}, {"backend", T}, {"head_dim", I}, {"tokens", I},
        {"iterations", I}, {"ns_per_iteration", R}, {"bytes_per_second", R}, {"bound_bytes_per_second", R}},
       {"id"},
       "run_id = ?1"},
      {"gate_decisions",
       {{"id", I}, {"baseline_run_id", I}, {"candidate_run_id", I}, {"config_id", I}, {"check_name", T},
        {"metric", T}, {"passed", I}, {"baseline_value", R}, {"candidate_value", R}, {"delta", R}, {"ci_low", R},
        {"ci_high", R}, {"threshold", R}, {"detail", T}, {"decided_at", T}},
       {"id", "check_name"},
       "candidate_run_id = ?1"},
      {"run_plans",
       {{"run_id", I}, {"plan_hash", T}, {"plan", T}, {"plan_items", I}, {"shard_index", I}, {"shard_count", I},
        {"shard_origin", T}},
       {"run_id"},
       "run_id = ?1"},
      {"run_plan_items", {{"run_id", I}, {"position", I}, {"item_key", T}, {"shard_index", I}}, {"position", "item_key"},
       "run_id = ?1"},
      {"run_merges",
       {{"run_id", I}, {"shard_index", I}, {"shard_count", I}, {"source_db", T}, {"source_run_id", I}, {"host", T},
        {"started_at", T}, {"finished_at", T}, {"digest", T}},
       {"shard_index"},
       "run_id = ?1"},
      {"config_endpoints",
       {{"run_id", I}, {"config_id", I}, {"name", T}, {"url", T}, {"engine", T}, {"engine_version", T}, {"model", T},
        {"kv", T}, {"kv_source", T}, {"kv_reported", T}, {"discovery", T}},
       {"config_id", "name"},
       "run_id = ?1"},
      {"item_failures",
       {{"run_id", I}, {"item_key", T}, {"config_id", I}, {"endpoint", T}, {"failure", T}, {"message", T},
        {"failed_at", T}},
       {"item_key"},
       "run_id = ?1"},
      {"load_replays",
       {{"run_id", I}, {"trace", T}, {"format", T}, {"requests", I}, {"time_scale", R}, {"max_inflight", I},
        {"slo_ttft_ms", R}, {"slo_tpot_ms", R}, {"block_tokens", I}, {"predict_gpu", T}, {"predict_model", T}},
       {"run_id"},
       "run_id = ?1"},
      {"load_requests",
       {{"run_id", I}, {"config_id", I}, {"request_index", I}, {"arrival_ms", R}, {"prompt_tokens", I},
        {"max_tokens", I}, {"ok", I}, {"failure", T}, {"output_tokens", I}, {"cached_tokens", I}, {"ttft_ms", R},
        {"tpot_ms", R}, {"latency_ms", R}, {"max_gap_ms", R}},
       {"config_id", "request_index"},
       "run_id = ?1"},
      {"capacity_predictions",
       {{"run_id", I}, {"config_id", I}, {"hit_rate", R}, {"ttft_p50_ms", R}, {"ttft_p95_ms", R}, {"ttft_p99_ms", R},
        {"tpot_p50_ms", R}, {"tpot_p95_ms", R}, {"output_tokens_per_s", R}, {"kv_token_capacity", I}, {"verdict", T}},
       {"config_id"},
       "run_id = ?1"},
      {"config_models",
       {{"run_id", I}, {"config_id", I}, {"kv_spec", T}, {"model_label", T}, {"model_path", T}, {"model_sha256", T},
        {"file_bytes", I}, {"weight_bytes", I}, {"weight_type", T}},
       {"config_id"},
       "run_id = ?1"},
      {"position_metrics",
       {{"item_id", I}, {"config_id", I}, {"turn_index", I}, {"position_from", I}, {"position_to", I},
        {"scored_tokens", I}, {"kld_sum", R}, {"delta_p_sum", R}, {"same_top1", I}},
       {"item_id", "config_id", "turn_index", "position_from"},
       kItemRows,
       true},
  };
}

const char* type_name(ColumnType t) {
  switch (t) {
    case ColumnType::integer: return "an integer";
    case ColumnType::real: return "a number";
    case ColumnType::text: return "text";
  }
  return "?";
}

// The value as stored and read back: the column's type decides, so a bound value and the same
// value read from the file give the same bytes.
SqlValue normalized(const DigestedTable& table, const Column& column, const SqlValue& value) {
  using Kind = SqlValue::Kind;
  if (value.is_null()) return {};
  switch (column.type) {
    case ColumnType::integer:
      if (value.kind == Kind::integer) return value;
      break;
    case ColumnType::real: {
      if (value.kind != Kind::real && value.kind != Kind::integer) break;
      const double x = value.kind == Kind::real ? value.r : static_cast<double>(value.i);
      if (std::isnan(x)) return {};
      return SqlValue(x == 0.0 ? 0.0 : x);
    }
    case ColumnType::text:
      if (value.kind == Kind::text) return value;
      break;
  }
  throw_internal_error("results table " + std::string(table.name) + ": column " + std::string(column.name) + " holds " +
                       type_name(column.type) + ", given another type");
}

void append_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

// Type-tagged, length-prefixed: no two rows of different values encode alike.
int64_t digest_of_normalized(const DigestedTable& table, const Row& row) {
  std::string buf;
  append_u64(buf, table.name.size());
  buf += table.name;
  for (const SqlValue& value : row) {
    switch (value.kind) {
      case SqlValue::Kind::null: buf += 'N'; break;
      case SqlValue::Kind::integer:
        buf += 'I';
        append_u64(buf, static_cast<uint64_t>(value.i));
        break;
      case SqlValue::Kind::real: {
        uint64_t bits = 0;
        std::memcpy(&bits, &value.r, sizeof bits);
        buf += 'R';
        append_u64(buf, bits);
        break;
      }
      case SqlValue::Kind::text:
        buf += 'T';
        append_u64(buf, value.t.size());
        buf += value.t;
        break;
    }
  }
  return static_cast<int64_t>(xxhash64(buf));
}

Row normalized_row(const DigestedTable& table, const Row& row) {
  if (row.size() != table.columns.size())
    throw_internal_error("results table " + std::string(table.name) + ": a row of " + std::to_string(row.size()) +
                         " values for " + std::to_string(table.columns.size()) + " columns");
  Row out;
  out.reserve(row.size());
  for (size_t i = 0; i < row.size(); ++i) out.push_back(normalized(table, table.columns[i], row[i]));
  return out;
}

void bind_value(Statement& s, int index, const SqlValue& value) {
  switch (value.kind) {
    case SqlValue::Kind::null: s.bind_null(index); break;
    case SqlValue::Kind::integer: s.bind(index, value.i); break;
    case SqlValue::Kind::real: s.bind(index, value.r); break;
    case SqlValue::Kind::text: s.bind(index, std::string_view(value.t)); break;
  }
}

std::string shown(const SqlValue& value) {
  if (value.kind == SqlValue::Kind::null) return "NULL";
  if (value.kind == SqlValue::Kind::integer) return std::to_string(value.i);
  if (value.kind == SqlValue::Kind::real) return std::to_string(value.r);
  std::string quoted(1, '\'');
  quoted += echo_user_text(value.t, 60);
  quoted += '\'';
  return quoted;
}

// "item_id 12 (item 'tables-003'), config_id 3": the row's key, with the item's key where the
// row belongs to an item.
std::string row_name(Connection& c, const DigestedTable& table, const Row& row) {
  std::string out;
  for (std::string_view k : table.key) {
    const SqlValue& v = row[column_index(table, k)];
    out += (out.empty() ? "" : ", ") + std::string(k) + " " + shown(v);
    if (k == "item_id" && v.kind == SqlValue::Kind::integer) {
      Statement item(c, "SELECT item_key FROM items WHERE id = ?1");
      item.bind(1, v.i);
      if (item.step()) out += " (item " + shown(SqlValue(item.column_text(0))) + ")";
    }
  }
  return out;
}

[[noreturn]] void tampered(Connection& c, const DigestedTable& table, int64_t run_id, const std::string& row,
                           const std::string& problem) {
  throw_input_error(c.path() + ": " + (run_id > 0 ? "run " + std::to_string(run_id) + ": " : "") + "table " +
                    std::string(table.name) + ", row " + row + ": " + problem);
}

constexpr const char* kAltered =
    "its values do not match its row digest: the row was changed, or written, outside kvgate (docs/schema.md, "
    "\"Row digests\"); the results in this database cannot be trusted";

}  // namespace

const std::vector<DigestedTable>& digested_tables() {
  static const std::vector<DigestedTable> tables = make_tables();
  return tables;
}

const DigestedTable& digested_table(std::string_view name) {
  for (const DigestedTable& t : digested_tables())
    if (t.name == name) return t;
  throw_internal_error("no results table " + std::string(name));
}

size_t column_index(const DigestedTable& table, std::string_view column) {
  for (size_t i = 0; i < table.columns.size(); ++i)
    if (table.columns[i].name == column) return i;
  throw_internal_error("results table " + std::string(table.name) + " has no column " + std::string(column));
}

int64_t row_digest(const DigestedTable& table, const Row& row) {
  return digest_of_normalized(table, normalized_row(table, row));
}

std::string digest_columns(const DigestedTable& table, std::string_view alias) {
  const std::string prefix = alias.empty() ? "" : std::string(alias) + ".";
  std::string out;
  for (const Column& c : table.columns) out += prefix + std::string(c.name) + ", ";
  return out + prefix + "row_digest";
}

Row read_row(const Statement& s, int first, const DigestedTable& table) {
  Row row;
  row.reserve(table.columns.size());
  for (size_t i = 0; i < table.columns.size(); ++i) {
    const int at = first + static_cast<int>(i);
    if (s.is_null(at)) {
      row.emplace_back();
      continue;
    }
    switch (table.columns[i].type) {
      case ColumnType::integer: row.emplace_back(s.column_int(at)); break;
      case ColumnType::real: {
        const double x = s.column_double(at);
        row.push_back(std::isnan(x) ? SqlValue() : SqlValue(x == 0.0 ? 0.0 : x));
        break;
      }
      case ColumnType::text: row.emplace_back(s.column_text(at)); break;
    }
  }
  return row;
}

void check_row(Connection& c, const Statement& s, int first, const DigestedTable& table, int64_t run_id) {
  const Row row = read_row(s, first, table);
  const int digest_at = first + static_cast<int>(table.columns.size());
  if (s.is_null(digest_at)) tampered(c, table, run_id, row_name(c, table, row), "it has no row digest: it was written outside kvgate");
  if (s.column_int(digest_at) != digest_of_normalized(table, row)) tampered(c, table, run_id, row_name(c, table, row), kAltered);
}

RowInserter::RowInserter(Connection& connection, const DigestedTable& table)
    : connection_(connection), table_(table), statement_(connection, [&] {
        std::string names, params;
        for (size_t i = 0; i <= table.columns.size(); ++i) {
          names += (i ? ", " : "") + std::string(i < table.columns.size() ? table.columns[i].name : "row_digest");
          params += (i ? ", ?" : "?") + std::to_string(i + 1);
        }
        return "INSERT INTO " + std::string(table.name) + " (" + names + ") VALUES (" + params + ")";
      }()) {}

int64_t RowInserter::insert(const Row& row) {
  const Row values = normalized_row(table_, row);
  statement_.reset();
  for (size_t i = 0; i < values.size(); ++i) bind_value(statement_, static_cast<int>(i + 1), values[i]);
  const int64_t digest = digest_of_normalized(table_, values);
  statement_.bind(static_cast<int>(values.size() + 1), digest);
  statement_.run();
  return digest;
}

int64_t RowInserter::insert_new_id(Row row, int64_t* digest) {
  if (!connection_.in_transaction())
    throw_internal_error("results table " + std::string(table_.name) + ": a new row's id and digest are written outside a transaction");
  if (table_.columns.empty() || table_.columns[0].name != "id" || row.empty() || !row[0].is_null())
    throw_internal_error("results table " + std::string(table_.name) + ": insert_new_id needs a NULL id first");
  const Row values = normalized_row(table_, row);
  statement_.reset();
  for (size_t i = 0; i < values.size(); ++i) bind_value(statement_, static_cast<int>(i + 1), values[i]);
  statement_.bind_null(static_cast<int>(values.size() + 1));
  statement_.run();
  const int64_t id = connection_.last_insert_rowid();
  row[0] = id;
  const int64_t d = row_digest(table_, row);
  Statement seal(connection_, "UPDATE " + std::string(table_.name) + " SET row_digest = ?1 WHERE rowid = ?2");
  seal.bind(1, d).bind(2, id).run();
  if (digest) *digest = d;
  return id;
}

bool update_row(Connection& c, const DigestedTable& table, std::string_view where, const Row& params,
                const std::function<void(Row&)>& change, int64_t run_id) {
  Row row;
  int64_t rowid = 0;
  {
    Statement select(c, "SELECT rowid, " + digest_columns(table) + " FROM " + std::string(table.name) + " WHERE " +
                            std::string(where));
    for (size_t i = 0; i < params.size(); ++i) bind_value(select, static_cast<int>(i + 1), params[i]);
    if (!select.step()) return false;
    check_row(c, select, 1, table, run_id);
    rowid = select.column_int(0);
    row = read_row(select, 1, table);
    if (select.step())
      throw_internal_error(c.path() + ": table " + std::string(table.name) + ": '" + std::string(where) +
                           "' selects more than one row to update");
  }
  change(row);
  const Row values = normalized_row(table, row);
  std::string sets;
  for (size_t i = 0; i < table.columns.size(); ++i)
    sets += std::string(table.columns[i].name) + " = ?" + std::to_string(i + 1) + ", ";
  const int n = static_cast<int>(values.size());
  Statement update(c, "UPDATE " + std::string(table.name) + " SET " + sets + "row_digest = ?" + std::to_string(n + 1) +
                          " WHERE rowid = ?" + std::to_string(n + 2));
  for (int i = 0; i < n; ++i) bind_value(update, i + 1, values[static_cast<size_t>(i)]);
  update.bind(n + 1, digest_of_normalized(table, values)).bind(n + 2, rowid);
  update.run();
  return true;
}

void upsert_row(Connection& c, const DigestedTable& table, std::string_view where, const Row& params, const Row& row,
                int64_t run_id) {
  if (!update_row(c, table, where, params, [&](Row& r) { r = row; }, run_id)) RowInserter(c, table).insert(row);
}

void add_to_run_seal(Connection& c, int64_t run_id, const ItemRowSeal& seal) {
  const DigestedTable& runs = digested_table("runs");
  const size_t rows = column_index(runs, "item_rows"), digest = column_index(runs, "item_rows_digest");
  const bool found = update_row(
      c, runs, "id = ?1", {run_id},
      [&](Row& r) {
        r[rows] = r[rows].i + seal.rows;
        r[digest] = static_cast<int64_t>(static_cast<uint64_t>(r[digest].i) + seal.digest_sum);
      },
      run_id);
  if (!found) throw_internal_error(c.path() + ": no run " + std::to_string(run_id) + " to seal items into");
}

void check_run_rows(Connection& c, int64_t run_id) {
  ItemRowSeal seal;
  std::optional<ItemRowSeal> stored;
  for (const DigestedTable& table : digested_tables()) {
    if (table.run_rows.empty()) continue;
    Statement s(c, "SELECT " + digest_columns(table) + " FROM " + std::string(table.name) + " WHERE " +
                       std::string(table.run_rows));
    s.bind(1, run_id);
    const int digest_at = static_cast<int>(table.columns.size());
    while (s.step()) {
      check_row(c, s, 0, table, run_id);
      if (table.item_row) seal.add(s.column_int(digest_at));
      if (table.name == "runs")
        stored = ItemRowSeal{s.column_int(static_cast<int>(column_index(table, "item_rows"))),
                             static_cast<uint64_t>(s.column_int(static_cast<int>(column_index(table, "item_rows_digest"))))};
    }
  }
  if (stored && (stored->rows != seal.rows || stored->digest_sum != seal.digest_sum))
    throw_input_error(c.path() + ": run " + std::to_string(run_id) + ": its items hold " + std::to_string(seal.rows) +
                      " rows (items, item_metrics, turn_metrics, token_class_metrics, latency_samples, position_metrics) "
                      "but the run's seal says " + std::to_string(stored->rows) +
                      (stored->rows == seal.rows ? " with other digests" : "") +
                      ": rows were deleted, added or replaced outside kvgate (docs/schema.md, \"Row digests\"); the "
                      "results of this run cannot be trusted");
}

void check_schema(Connection& c) {
  const std::string version = std::to_string(latest_schema_version());
  for (const DigestedTable& table : digested_tables()) {
    std::set<std::string> found;
    Statement info(c, "SELECT name FROM pragma_table_info(?1)");
    info.bind(1, table.name);
    while (info.step()) found.insert(info.column_text(0));
    const std::string prefix = c.path() + ": not a kvgate results database of schema version " + version + ": table " +
                               std::string(table.name);
    if (found.empty()) throw_input_error(prefix + " is missing");
    std::set<std::string> expected{"row_digest"};
    for (const Column& col : table.columns) expected.insert(std::string(col.name));
    for (const std::string& name : expected)
      if (!found.count(name)) throw_input_error(prefix + " has no column " + name);
    for (const std::string& name : found)
      if (!expected.count(name)) throw_input_error(prefix + " has a column " + echo_user_text(name) + " that it should not");
  }
}

void seal_all_rows(Connection& c) {
  // Item rows first, then the runs' seals over them, then every other table (runs included, whose
  // digests cover their seals).
  std::map<int64_t, ItemRowSeal> seals;
  auto seal_table = [&](const DigestedTable& table) {
    // In chunks by rowid: the digests are written back between reads, never under an open cursor.
    for (int64_t last = std::numeric_limits<int64_t>::min();;) {
      std::vector<std::pair<int64_t, int64_t>> digests;  // rowid, digest
      {
        const bool by_item = table.item_row && table.name != "items";
        Statement s(c, "SELECT t.rowid, " + std::string(by_item ? "i.run_id" : table.item_row ? "t.run_id" : "0") + ", " +
                           digest_columns(table, "t") + " FROM " + std::string(table.name) + " t " +
                           (by_item ? "JOIN items i ON i.id = t.item_id " : "") +
                           "WHERE t.rowid > ?1 ORDER BY t.rowid LIMIT 65536");
        s.bind(1, last);
        while (s.step()) {
          const int64_t digest = digest_of_normalized(table, read_row(s, 2, table));
          digests.emplace_back(s.column_int(0), digest);
          if (table.item_row) seals[s.column_int(1)].add(digest);
        }
      }
      if (digests.empty()) return;
      Statement update(c, "UPDATE " + std::string(table.name) + " SET row_digest = ?1 WHERE rowid = ?2");
      for (const auto& [rowid, digest] : digests) {
        update.reset();
        update.bind(1, digest).bind(2, rowid).run();
      }
      last = digests.back().first;
    }
  };
  for (const DigestedTable& table : digested_tables())
    if (table.item_row) seal_table(table);
  {
    Statement reset(c, "UPDATE runs SET item_rows = 0, item_rows_digest = 0");
    reset.run();
    Statement set(c, "UPDATE runs SET item_rows = ?1, item_rows_digest = ?2 WHERE id = ?3");
    for (const auto& [run_id, seal] : seals) {
      set.reset();
      set.bind(1, seal.rows).bind(2, static_cast<int64_t>(seal.digest_sum)).bind(3, run_id).run();
    }
  }
  for (const DigestedTable& table : digested_tables())
    if (!table.item_row) seal_table(table);
}

}  // namespace kvgate::results
