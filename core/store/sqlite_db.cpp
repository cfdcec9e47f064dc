#include "store/sqlite_db.h"

namespace rematlab {
namespace {

int open_flags(Database::Mode mode) {
  switch (mode) {
    case Database::Mode::kReadWriteCreate:
      return SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    case Database::Mode::kReadWrite:
      return SQLITE_OPEN_READWRITE;
    case Database::Mode::kReadOnly:
      return SQLITE_OPEN_READONLY;
  }
  return SQLITE_OPEN_READONLY;
}

}  // namespace

Database::Database(const std::string& path, Mode mode) : path_(path) {
  const int rc = sqlite3_open_v2(path.c_str(), &handle_, open_flags(mode) | SQLITE_OPEN_NOMUTEX,
                                 nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = handle_ ? sqlite3_errmsg(handle_) : sqlite3_errstr(rc);
    sqlite3_close(handle_);
    handle_ = nullptr;
    throw StoreError("cannot open database '" + path + "': " + message);
  }
  sqlite3_extended_result_codes(handle_, 1);
  // Readers and the writer share the file; wait for each other instead of failing with
  // "database is locked".
  sqlite3_busy_timeout(handle_, 10000);
}

Database::~Database() { sqlite3_close(handle_); }

void Database::exec(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(handle_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error ? error : sqlite3_errmsg(handle_);
    sqlite3_free(error);
    throw StoreError("database '" + path_ + "': " + message + " (in: " + sql.substr(0, 80) + ")");
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
                   sqlite3_errmsg(db_.handle()) + " (in: " + sql_.substr(0, 80) + ")");
}

Statement& Statement::bind(int index, int64_t value) {
  if (sqlite3_bind_int64(statement_, index, value) != SQLITE_OK) fail("bind");
  return *this;
}
Statement& Statement::bind(int index, double value) {
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
  while (step()) {
  }
  reset();
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
