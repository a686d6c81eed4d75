#pragma once
// Thin RAII over the SQLite C API: one connection, prepared statements, and an IMMEDIATE
// transaction. Every SQLite failure becomes a kvgate::Error whose kind follows the CLI
// contract: a file that is not a database is bad input (exit 2); busy, disk and I/O failures
// are environment errors (exit 3); a violated constraint is our own bug (internal, exit 3).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace kvgate::results {

// How long a writer waits for another process's transaction: long enough for a per-item
// transaction to finish, short enough that a wedged writer is reported instead of hanging CI.
inline constexpr int kBusyTimeoutMs = 10000;

class Connection {
 public:
  // create = false opens only an existing file (a missing one is an input error).
  Connection(const std::string& path, bool create);
  // Opens an existing file for reading only, for a database whose file or directory this
  // process cannot write: a WAL database is then read without creating its -wal and -shm side
  // files (SQLite's immutable=1; with a -wal file left behind, mode=ro so its commits are seen).
  static std::unique_ptr<Connection> read_only(const std::string& path);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  sqlite3* handle() const { return db_; }
  bool is_read_only() const { return read_only_; }
  const std::string& path() const { return path_; }
  // Runs constant SQL without parameters (schema DDL, pragmas), one statement at a time.
  void execute_script(std::string_view sql);
  // Runs one statement and returns SQLite's result code instead of throwing on SQLITE_BUSY /
  // SQLITE_LOCKED (other failures still throw), for callers that retry.
  int execute_busy_aware(std::string_view sql);
  [[noreturn]] void fail(int rc, const std::string& what) const;
  // Whether a transaction is open on this connection.
  bool in_transaction() const;
  // The rowid of the last row this connection inserted.
  int64_t last_insert_rowid() const;

 private:
  Connection(const std::string& path, const std::string& uri, int flags);
  sqlite3* db_ = nullptr;
  std::string path_;
  bool read_only_ = false;
};

class Statement {
 public:
  Statement(Connection& connection, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are numbered from 1, as in SQLite. NaN is stored as NULL (SQLite has no NaN).
  Statement& bind(int index, int64_t value);
  Statement& bind(int index, double value);
  Statement& bind(int index, std::string_view value);
  Statement& bind_null(int index);
  template <typename T>
  Statement& bind(int index, const std::optional<T>& value) {
    return value ? bind(index, *value) : bind_null(index);
  }
  Statement& bind(int index, const char* value) { return bind(index, std::string_view(value)); }
  Statement& bind(int index, const std::string& value) { return bind(index, std::string_view(value)); }
  Statement& bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
  Statement& bind(int index, bool value) { return bind(index, static_cast<int64_t>(value)); }

  bool step();  // true while a row is available
  void run();   // steps a statement that returns no rows
  void reset();

  bool is_null(int column) const;
  int64_t column_int(int column) const;
  double column_double(int column) const;  // NULL reads as NaN
  std::string column_text(int column) const;  // NULL reads as ""
  std::optional<int64_t> column_optional_int(int column) const;

 private:
  Connection& connection_;
  sqlite3_stmt* stmt_ = nullptr;
};

// BEGIN IMMEDIATE takes the write lock up front, so two writers queue on the busy timeout
// instead of one failing with SQLITE_BUSY when it upgrades a read lock mid-transaction.
// Destroying an uncommitted transaction rolls it back. A transaction begun while another is
// open on the connection is a savepoint inside it: its commit folds it into the outer one, so
// writers that commit per item (ItemWriter) also compose into one all-or-nothing merge.
class Transaction {
 public:
  explicit Transaction(Connection& connection);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  Transaction(Transaction&& other) noexcept;
  void commit();

 private:
  Connection* connection_;
  bool nested_ = false;
};

}  // namespace kvgate::results
