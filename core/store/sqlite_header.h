// The first 100 bytes of an SQLite file, read without SQLite: what a file claims to be before
// anything opens it (opening can create -wal and -shm files beside it, and SQLite's own errors
// cannot tell a damaged RematLab database from another program's file).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace rematlab {

struct SqliteHeader {
  int64_t page_size = 0;
  // The database's size in pages when the header says it is current (else 0): a file shorter
  // than page_size × page_count was cut short.
  int64_t page_count = 0;
  int32_t user_version = 0;
  int32_t application_id = 0;
};

// Nothing when the file is missing or does not start with SQLite's magic string.
std::optional<SqliteHeader> read_sqlite_header(const std::string& path);

}  // namespace rematlab
