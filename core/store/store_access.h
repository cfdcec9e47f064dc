// How a command opens the runs database. Kept apart from the SQLite layer so that code which
// only reads runs (the window, reports) needs no SQLite header.
#pragma once

#include <string>

#include "common/errors.h"

namespace rematlab {

enum class StoreAccess {
  kReadWrite,  // create (if asked), migrate, write
  kReadOnly,   // never create, migrate or write; the file's bytes stay as they are
};

// The database is write-protected (or on a read-only file system) and a writing command was
// asked for: a bad input (exit 2) that the window answers by opening it read-only instead.
class ReadOnlyDatabase : public InvalidInput {
 public:
  explicit ReadOnlyDatabase(const std::string& path)
      : InvalidInput("--db", "'" + path +
                                 "' (or its folder) is write-protected: it can be read "
                                 "but not written; it was left unchanged") {}
};

}  // namespace rematlab
