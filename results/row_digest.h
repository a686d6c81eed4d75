#pragma once
// Tamper evidence for the results store (docs/schema.md, "Row digests"). SQLite's quick_check
// sees a damaged page but not a changed value: one byte of a stored kld_mean, edited in place
// or with the sqlite3 shell, reads back as a valid number. So every row kvgate writes carries
// `row_digest`, the xxHash64 of its table's name and its values column by column, and every
// reader checks it; each run also keeps a seal over the rows its items wrote (their count and
// the sum of their digests, `runs.item_rows` / `runs.item_rows_digest`), so a deleted or added
// row is seen as well. A mismatch is an input error (exit 2) naming the file, the run, the table
// and the row.
//
// The tables' columns are listed here once (digested_tables()), and everything that reads or
// writes a digest is driven by that list: inserts, read-modify-write updates, the checks, the
// schema check that refuses a file whose tables lack a column, and the sealing of rows written
// before digests existed. A digest is a content hash, not a signature: it catches a value
// changed by accident or by hand, not someone who recomputes it with this code.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "results/sqlite.h"

namespace kvgate::results {

enum class ColumnType : uint8_t { integer, real, text };

struct Column {
  std::string_view name;
  ColumnType type;
};

struct DigestedTable {
  std::string_view name;
  std::vector<Column> columns;        // every column but row_digest, in the schema's order
  std::vector<std::string_view> key;  // the columns that name one row in a message
  // A condition on the table's columns (alias-free) selecting the rows of run ?1; "" for a table
  // whose rows belong to no run.
  std::string_view run_rows;
  // Written with an item (ItemWriter), so counted in the run's seal.
  bool item_row = false;
};

// Every table of the schema, in creation order.
const std::vector<DigestedTable>& digested_tables();
const DigestedTable& digested_table(std::string_view name);
// The column's position in table.columns; internal error for a name the table does not have.
size_t column_index(const DigestedTable& table, std::string_view column);

// One value of a row as kvgate binds it. A double NaN and an empty optional are NULL, as SQLite
// stores them; -0.0 is +0.0, as SQLite reads it back.
struct SqlValue {
  enum class Kind : uint8_t { null, integer, real, text };
  Kind kind = Kind::null;
  int64_t i = 0;
  double r = 0;
  std::string t;

  SqlValue() = default;
  SqlValue(std::nullopt_t) {}
  SqlValue(int64_t x) : kind(Kind::integer), i(x) {}
  SqlValue(int x) : kind(Kind::integer), i(x) {}
  SqlValue(bool x) : kind(Kind::integer), i(x) {}
  SqlValue(double x) : kind(Kind::real), r(x) {}
  SqlValue(std::string x) : kind(Kind::text), t(std::move(x)) {}
  SqlValue(std::string_view x) : kind(Kind::text), t(x) {}
  SqlValue(const char* x) : kind(Kind::text), t(x) {}
  template <typename T>
  SqlValue(const std::optional<T>& x) : SqlValue(x ? SqlValue(*x) : SqlValue()) {}
  bool is_null() const { return kind == Kind::null; }
};

using Row = std::vector<SqlValue>;

// The digest of `row` (table.columns' values, in order) as stored in row_digest. Internal error
// for a value whose type does not fit its column (an integer column given text, ...).
int64_t row_digest(const DigestedTable& table, const Row& row);

// "t.a, t.b, ..., t.row_digest": the table's columns and its digest, for a SELECT.
std::string digest_columns(const DigestedTable& table, std::string_view alias = "");
// The values of the table's columns read from `s`'s current row from column `first` on, as
// kvgate reads them (digest_columns' order, row_digest not included).
Row read_row(const Statement& s, int first, const DigestedTable& table);
// Throws an input error unless the row read at `first` (digest_columns' order) matches its
// stored digest, naming the file, the run (`run_id`, 0 for none), the table and the row.
void check_row(Connection& connection, const Statement& s, int first, const DigestedTable& table, int64_t run_id);

// Inserts rows with their digests into one table, one prepared statement for many rows.
class RowInserter {
 public:
  // Plain inserts only: a row that replaces another is changed with update_row, so no stored row
  // changes without its digest being checked first.
  RowInserter(Connection& connection, const DigestedTable& table);
  // Returns the stored digest.
  int64_t insert(const Row& row);
  // For a table whose first column is its INTEGER PRIMARY KEY, given as NULL: SQLite picks the id,
  // then the digest that covers it is written. Inside an open transaction only (internal error
  // otherwise), so no reader ever sees the row without its digest. Returns the id.
  int64_t insert_new_id(Row row, int64_t* digest = nullptr);
  const DigestedTable& table() const { return table_; }

 private:
  Connection& connection_;
  const DigestedTable& table_;
  Statement statement_;
};

// Changes the one row `where` (a condition on the table's columns, parameters ?1... bound from
// `params`) selects: its stored digest is checked first, `change` edits its values, and the row
// is written back with its new digest. False when no row matches; internal error when several do.
bool update_row(Connection& connection, const DigestedTable& table, std::string_view where, const Row& params,
                const std::function<void(Row&)>& change, int64_t run_id);

// update_row's `change` replacing the whole row with `row`, or a plain insert when no row matches.
void upsert_row(Connection& connection, const DigestedTable& table, std::string_view where, const Row& params,
                const Row& row, int64_t run_id);

// The seal of a run's item rows: how many there are and the sum (mod 2^64) of their digests.
struct ItemRowSeal {
  int64_t rows = 0;
  uint64_t digest_sum = 0;
  void add(int64_t digest) {
    ++rows;
    digest_sum += static_cast<uint64_t>(digest);
  }
};
// Adds `seal` to run `run_id`'s stored seal (runs.item_rows, runs.item_rows_digest).
void add_to_run_seal(Connection& connection, int64_t run_id, const ItemRowSeal& seal);

// Checks every row of run `run_id` in every table (its configs included) against its digest, and
// its item rows against the run's seal. Input error naming the first row that does not match.
void check_run_rows(Connection& connection, int64_t run_id);

// Input error unless every table of digested_tables() exists with exactly its columns and
// row_digest: a file that says it is a kvgate database of this schema but is not.
void check_schema(Connection& connection);

// Computes every row's digest and every run's seal from the values stored now: the migration that
// adds digests to an older file, which protect its rows from then on, not before.
void seal_all_rows(Connection& connection);

}  // namespace kvgate::results
