#include "results/sqlite.h"

#include <sqlite3.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <limits>

#include "core/error.h"

namespace kvgate::results {

Connection::Connection(const std::string& path, bool create)
    : Connection(path, path, SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0)) {}

std::unique_ptr<Connection> Connection::read_only(const std::string& path) {
  // A file: URI; the characters a URI gives meaning to are escaped.
  std::string uri = "file:";
  for (const char c : path) {
    if (c == '%') uri += "%25";
    else if (c == '?') uri += "%3f";
    else if (c == '#') uri += "%23";
    else uri += c;
  }
  std::error_code ec;
  const bool has_wal = std::filesystem::file_size(path + "-wal", ec) > 0 && !ec;
  uri += has_wal ? "?mode=ro" : "?immutable=1";
  return std::unique_ptr<Connection>(new Connection(path, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI));
}

Connection::Connection(const std::string& path, const std::string& uri, int flags) : path_(path) {
  read_only_ = (flags & SQLITE_OPEN_READONLY) != 0;
  const int rc = sqlite3_open_v2(uri.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    // The path came from --db or $KVGATE_DB: a missing directory or a directory given as the
    // file is the user's to fix.
    if (rc == SQLITE_CANTOPEN) throw_input_error(path + ": cannot open results database (" + message + ")");
    throw_environment_error(path + ": cannot open results database (" + message + ")");
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
  // SQLite quietly opens a file it may not write read-only; a command that writes says so now,
  // before any work, rather than at its first write.
  if (!read_only_ && sqlite3_db_readonly(db_, "main") == 1) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw_input_error(path + ": cannot write the results database (the file is read-only)");
  }
}

Connection::~Connection() { sqlite3_close_v2(db_); }

bool Connection::in_transaction() const { return sqlite3_get_autocommit(db_) == 0; }

int64_t Connection::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }

void Connection::fail(int rc, const std::string& what) const {
  const std::string detail = what + ": " + sqlite3_errmsg(db_);
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
      throw_input_error(path_ + ": not a usable kvgate results database (" + detail + ")");
    case SQLITE_CORRUPT:
      throw_input_error(path_ + ": damaged results database (" + detail + ")");
    case SQLITE_CANTOPEN:
      throw_input_error(path_ + ": cannot open results database (" + detail + ")");
    case SQLITE_READONLY:
      // The file (or its directory) is not writable by this process: the user's to fix, as
      // for any other output path.
      throw_input_error(path_ + ": cannot write the results database (" + detail + ")");
    case SQLITE_ERROR:
      // SQLite reports a schema format number it does not know (header offset 44) as a plain
      // error: the file's, not a statement of ours.
      if (std::strstr(sqlite3_errmsg(db_), "unsupported file format"))
        throw_input_error(path_ + ": not a usable kvgate results database (" + detail + ")");
      throw_internal_error(path_ + ": " + detail);
    case SQLITE_CONSTRAINT:
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
      throw_internal_error(path_ + ": " + detail);
    default:
      throw_environment_error(path_ + ": " + detail);
  }
}

void Connection::execute_script(std::string_view sql) {
  const char* cursor = sql.data();
  const char* end = sql.data() + sql.size();
  while (cursor < end) {
    sqlite3_stmt* stmt = nullptr;
    const char* tail = nullptr;
    int rc = sqlite3_prepare_v2(db_, cursor, static_cast<int>(end - cursor), &stmt, &tail);
    if (rc != SQLITE_OK) fail(rc, "preparing schema statement");
    cursor = tail;
    if (!stmt) continue;  // whitespace or a comment after the last statement
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    }
    sqlite3_finalize(stmt);
    if (rc != SQLITE_DONE) fail(rc, "running schema statement");
  }
}

int Connection::execute_busy_aware(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    }
    sqlite3_finalize(stmt);
    if (rc == SQLITE_DONE) return SQLITE_OK;
  }
  if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED) return rc;
  fail(rc, "running statement");
}

Statement::Statement(Connection& connection, std::string_view sql) : connection_(connection) {
  const int rc =
      sqlite3_prepare_v2(connection.handle(), sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
  if (rc != SQLITE_OK) connection_.fail(rc, "preparing \"" + std::string(sql.substr(0, 60)) + "\"");
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::bind(int index, int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK) connection_.fail(rc, "binding parameter " + std::to_string(index));
  return *this;
}

Statement& Statement::bind(int index, double value) {
  if (std::isnan(value)) return bind_null(index);
  const int rc = sqlite3_bind_double(stmt_, index, value);
  if (rc != SQLITE_OK) connection_.fail(rc, "binding parameter " + std::to_string(index));
  return *this;
}

Statement& Statement::bind(int index, std::string_view value) {
  const int rc = sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) connection_.fail(rc, "binding parameter " + std::to_string(index));
  return *this;
}

Statement& Statement::bind_null(int index) {
  const int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK) connection_.fail(rc, "binding parameter " + std::to_string(index));
  return *this;
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  const std::string sql = sqlite3_sql(stmt_);
  sqlite3_reset(stmt_);
  connection_.fail(rc, "running \"" + sql.substr(0, 60) + "\"");
}

void Statement::run() {
  if (step()) throw_internal_error(connection_.path() + ": statement unexpectedly returned rows: " + sqlite3_sql(stmt_));
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

bool Statement::is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

int64_t Statement::column_int(int column) const { return sqlite3_column_int64(stmt_, column); }

double Statement::column_double(int column) const {
  if (is_null(column)) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt_, column);
}

std::string Statement::column_text(int column) const {
  const auto* text = sqlite3_column_text(stmt_, column);
  if (!text) return {};
  return std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

std::optional<int64_t> Statement::column_optional_int(int column) const {
  if (is_null(column)) return std::nullopt;
  return column_int(column);
}

Transaction::Transaction(Connection& connection)
    : connection_(&connection), nested_(sqlite3_get_autocommit(connection.handle()) == 0) {
  Statement(connection, nested_ ? "SAVEPOINT kvgate_nested" : "BEGIN IMMEDIATE").run();
}

Transaction::Transaction(Transaction&& other) noexcept : connection_(other.connection_), nested_(other.nested_) {
  other.connection_ = nullptr;
}

Transaction::~Transaction() {
  if (!connection_) return;
  // A destructor must not throw; if the rollback itself fails, SQLite rolls back the open
  // transaction when the connection closes, so nothing partial is ever committed.
  auto run_quietly = [this](const char* sql) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(connection_->handle(), sql, -1, &stmt, nullptr) == SQLITE_OK) sqlite3_step(stmt);
    sqlite3_finalize(stmt);
  };
  if (nested_) {
    run_quietly("ROLLBACK TO kvgate_nested");
    run_quietly("RELEASE kvgate_nested");
  } else {
    run_quietly("ROLLBACK");
  }
}

void Transaction::commit() {
  if (!connection_) throw_internal_error("commit of a transaction that is already finished");
  Statement(*connection_, nested_ ? "RELEASE kvgate_nested" : "COMMIT").run();
  connection_ = nullptr;
}

}  // namespace kvgate::results
