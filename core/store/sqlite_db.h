// A thin RAII layer over sqlite3: one Database per connection, one Statement per prepared
// query. Every failing call throws StoreError carrying SQLite's own message and the SQL.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "store/store_error.h"

namespace rematlab {

class Database {
 public:
  // kImmutable reads a file that nothing can change while it is open: no locks and no -shm
  // file, so a read-only database in a folder we cannot write to opens too. kQueryOnly opens a
  // writable file read-write but refuses every write (PRAGMA query_only): a reader that, as the
  // last connection to close, removes the -wal and -shm files a read-only one would leave.
  enum class Mode { kReadWriteCreate, kReadWrite, kReadOnly, kImmutable, kQueryOnly };
  Database(const std::string& path, Mode mode);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  void exec(const std::string& sql);  // one or more statements without parameters
  int64_t last_insert_id() const { return sqlite3_last_insert_rowid(handle_); }
  int changes() const { return sqlite3_changes(handle_); }
  sqlite3* handle() const { return handle_; }
  // True when SQLite opened the file read-only (asked to, or it could not open it for writing).
  bool read_only() const;
  // False once SQLite has rolled a transaction back on its own (a full disk, an I/O error).
  bool in_transaction() const { return sqlite3_get_autocommit(handle_) == 0; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  sqlite3* handle_ = nullptr;
};

class Statement {
 public:
  Statement(Database& db, const std::string& sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are 1-based, as in SQLite.
  Statement& bind(int index, int64_t value);
  // Non-finite values are stored as the text 'nan', 'inf' or '-inf' (SQLite would store NULL),
  // and column_number() reads them back.
  Statement& bind(int index, double value);
  Statement& bind(int index, const std::string& value);
  Statement& bind_null(int index);
  Statement& bind(int index, const std::optional<int64_t>& value);

  bool step();  // true while a row is available
  void run();   // a statement that returns no rows; always reset for reuse, even when it throws
  void reset();

  int64_t column_int(int column) const;
  double column_double(int column) const;
  // A REAL column written by bind(double): numbers, 'nan'/'inf'/'-inf', and NULL (how schema 3
  // stored a non-finite value) as NaN.
  double column_number(int column) const;
  std::string column_text(int column) const;
  bool column_is_null(int column) const;
  int column_count() const;
  std::string column_name(int column) const;

 private:
  [[noreturn]] void fail(const char* what) const;
  Database& db_;
  std::string sql_;
  sqlite3_stmt* statement_ = nullptr;
};

// BEGIN IMMEDIATE … COMMIT; rolls back unless commit() was called.
class Transaction {
 public:
  explicit Transaction(Database& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Database& db_;
  bool open_ = true;
};

}  // namespace rematlab
