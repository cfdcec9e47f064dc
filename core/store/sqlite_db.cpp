#include "store/sqlite_db.h"

#include <cmath>
#include <cstdio>

namespace rematlab {
namespace {

// How long a statement waits for another connection's lock before it fails as "locked".
constexpr int kBusyTimeoutMs = 5000;

int open_flags(Database::Mode mode) {
  switch (mode) {
    case Database::Mode::kReadWriteCreate:
      return SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    case Database::Mode::kReadWrite:
    case Database::Mode::kQueryOnly:
      return SQLITE_OPEN_READWRITE;
    case Database::Mode::kReadOnly:
    case Database::Mode::kImmutable:
      return SQLITE_OPEN_READONLY;
  }
  return SQLITE_OPEN_READONLY;
}

// A URI, so read-only modes can say so to SQLite itself: `mode=ro` (and `immutable=1`).
std::string uri_for(const std::string& path, Database::Mode mode) {
  // "file:" + an absolute path would read a leading "//" as a host name: an empty one first.
  std::string uri = !path.empty() && path[0] == '/' ? "file://" : "file:";
  for (const unsigned char c : path) {
    if (c == '%' || c == '?' || c == '#' || c < 0x21 || c > 0x7e) {
      char escaped[4];
      std::snprintf(escaped, sizeof escaped, "%%%02X", c);
      uri += escaped;
    } else {
      uri += static_cast<char>(c);
    }
  }
  if (mode == Database::Mode::kReadOnly) uri += "?mode=ro";
  if (mode == Database::Mode::kImmutable) uri += "?mode=ro&immutable=1";
  return uri;
}

}  // namespace

bool StoreError::locked() const { return code_ == SQLITE_BUSY || code_ == SQLITE_LOCKED; }

Database::Database(const std::string& path, Mode mode) : path_(path) {
  const int rc = sqlite3_open_v2(uri_for(path, mode).c_str(), &handle_,
                                 open_flags(mode) | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = handle_ ? sqlite3_errmsg(handle_) : sqlite3_errstr(rc);
    sqlite3_close(handle_);
    handle_ = nullptr;
    throw StoreError("cannot open database '" + path + "': " + message, rc & 0xff);
  }
  sqlite3_extended_result_codes(handle_, 1);
  // Readers and the writer share the file; wait for each other instead of failing with
  // "database is locked".
  sqlite3_busy_timeout(handle_, kBusyTimeoutMs);
  if (mode == Mode::kQueryOnly) exec("PRAGMA query_only = 1");
}

bool Database::read_only() const { return sqlite3_db_readonly(handle_, "main") == 1; }

Database::~Database() { sqlite3_close(handle_); }

void Database::exec(const std::string& sql) {
  char* error = nullptr;
  const int rc = sqlite3_exec(handle_, sql.c_str(), nullptr, nullptr, &error);
  if (rc != SQLITE_OK) {
    std::string message = error ? error : sqlite3_errmsg(handle_);
    sqlite3_free(error);
    throw StoreError("database '" + path_ + "': " + message + " (in: " + sql.substr(0, 80) + ")",
                     rc & 0xff);
  }
}

Statement::Statement(Database& db, const std::string& sql) : db_(db), sql_(sql) {
  if (sqlite3_prepare_v2(db.handle(), sql.c_str(), -1, &statement_, nullptr) != SQLITE_OK) {
    fail("prepare");
  }
}

Statement::~Statement() { sqlite3_finalize(statement_); }

void Statement::fail(const char* what) const {
  throw StoreError("database '" + db_.path() + "': " + what + " failed: " +
                       sqlite3_errmsg(db_.handle()) + " (in: " + sql_.substr(0, 80) + ")",
                   sqlite3_errcode(db_.handle()) & 0xff);
}

Statement& Statement::bind(int index, int64_t value) {
  if (sqlite3_bind_int64(statement_, index, value) != SQLITE_OK) fail("bind");
  return *this;
}
Statement& Statement::bind(int index, double value) {
  if (!std::isfinite(value)) {
    return bind(index, std::string(std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf"));
  }
  if (sqlite3_bind_double(statement_, index, value) != SQLITE_OK) fail("bind");
  return *this;
}
Statement& Statement::bind(int index, const std::string& value) {
  if (sqlite3_bind_text(statement_, index, value.data(), static_cast<int>(value.size()),
                        SQLITE_TRANSIENT) != SQLITE_OK) {
    fail("bind");
  }
  return *this;
}
Statement& Statement::bind_null(int index) {
  if (sqlite3_bind_null(statement_, index) != SQLITE_OK) fail("bind");
  return *this;
}
Statement& Statement::bind(int index, const std::optional<int64_t>& value) {
  return value ? bind(index, *value) : bind_null(index);
}

bool Statement::step() {
  const int rc = sqlite3_step(statement_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  fail("step");
}

void Statement::run() {
  // A failing step leaves the statement halted; a cached statement that is not reset keeps its
  // error and its bindings into the next use.
  struct ResetOnExit {
    Statement& statement;
    ~ResetOnExit() { statement.reset(); }
  } reset_on_exit{*this};
  while (step()) {
  }
}

void Statement::reset() {
  sqlite3_reset(statement_);
  sqlite3_clear_bindings(statement_);
}

int64_t Statement::column_int(int column) const { return sqlite3_column_int64(statement_, column); }
double Statement::column_double(int column) const {
  return sqlite3_column_double(statement_, column);
}
std::string Statement::column_text(int column) const {
  const auto* text = sqlite3_column_text(statement_, column);
  return text ? std::string(reinterpret_cast<const char*>(text),
                            static_cast<std::size_t>(sqlite3_column_bytes(statement_, column)))
              : std::string();
}
double Statement::column_number(int column) const {
  switch (sqlite3_column_type(statement_, column)) {
    case SQLITE_NULL:
      return std::nan("");
    case SQLITE_TEXT: {
      const std::string text = column_text(column);
      if (text == "inf") return HUGE_VAL;
      if (text == "-inf") return -HUGE_VAL;
      return std::nan("");
    }
    case SQLITE_BLOB:  // not a number (sqlite would read its bytes as text: x'3132' as 12)
      return std::nan("");
    default:
      return sqlite3_column_double(statement_, column);
  }
}

bool Statement::column_is_null(int column) const {
  return sqlite3_column_type(statement_, column) == SQLITE_NULL;
}
int Statement::column_count() const { return sqlite3_column_count(statement_); }
std::string Statement::column_name(int column) const {
  return sqlite3_column_name(statement_, column);
}

Transaction::Transaction(Database& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
  if (!open_) return;
  try {
    db_.exec("ROLLBACK");
  } catch (const StoreError&) {
    // The connection is already unusable; the rollback happens when it closes.
  }
}

void Transaction::commit() {
  db_.exec("COMMIT");
  open_ = false;
}

}  // namespace rematlab
