// A thin RAII layer over sqlite3: one Database per connection, one Statement per prepared
// query. Every failing call throws StoreError carrying SQLite's own message and the SQL.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace rematlab {

class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Database {
 public:
  enum class Mode { kReadWriteCreate, kReadWrite, kReadOnly };
  Database(const std::string& path, Mode mode);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  void exec(const std::string& sql);  // one or more statements without parameters
  int64_t last_insert_id() const { return sqlite3_last_insert_rowid(handle_); }
  int changes() const { return sqlite3_changes(handle_); }
  sqlite3* handle() const { return handle_; }
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
  Statement& bind(int index, double value);
  Statement& bind(int index, const std::string& value);
  Statement& bind_null(int index);
  Statement& bind(int index, const std::optional<int64_t>& value);

  bool step();       // true while a row is available
  void run();        // a statement that returns no rows; resets it for reuse
  void reset();

  int64_t column_int(int column) const;
  double column_double(int column) const;
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
