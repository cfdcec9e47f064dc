// What the SQLite layer throws when a call fails: SQLite's own message and the SQL, for the CLI
// and the logs. Apart from sqlite_db.h so that code without SQLite's header (the window) can tell
// it from other errors.
#pragma once

#include <stdexcept>
#include <string>

namespace rematlab {

class StoreError : public std::runtime_error {
 public:
  explicit StoreError(const std::string& message, int code = 0)
      : std::runtime_error(message), code_(code) {}
  // SQLite's primary result code (SQLITE_BUSY, SQLITE_READONLY, …); 0 when not from SQLite.
  int code() const { return code_; }
  // Another connection holds a lock we waited for in vain.
  bool locked() const;

 private:
  int code_;
};

}  // namespace rematlab
