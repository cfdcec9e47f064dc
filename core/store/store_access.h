// How a command opens the runs database. Kept apart from the SQLite layer so that code which
// only reads runs (the window, reports) needs no SQLite header.
#pragma once

#include <string>
#include <utility>

#include "common/errors.h"

namespace rematlab {

enum class StoreAccess {
  kReadWrite,  // create (if asked), migrate, write
  kReadOnly,   // never create, migrate or write; the file's bytes stay as they are
};

// A runs database refused before or while it is opened: `problem` says what is wrong with the
// file ("is a folder", "is a damaged RematLab database"), `detail` what SQLite or the file's
// header said, `after` what to do. The CLI says all of it with the path; the window names the
// path above and says "This file " + problem().
class DatabaseRefused : public InvalidInput {
 public:
  DatabaseRefused(const std::string& path, std::string problem, const std::string& detail = {},
                  const std::string& after = {})
      : InvalidInput("--db", "'" + path + "' " + problem +
                                 (detail.empty() ? "" : " (" + detail + ")") + after),
        problem_(std::move(problem)) {}
  const std::string& problem() const { return problem_; }

 private:
  std::string problem_;
};

// The database is write-protected (or on a read-only file system) and a writing command was
// asked for: a bad input (exit 2) that the window answers by opening it read-only instead.
class ReadOnlyDatabase : public DatabaseRefused {
 public:
  explicit ReadOnlyDatabase(const std::string& path)
      : DatabaseRefused(path, "(or its folder) is write-protected: it can be read but not written",
                        {}, "; it was left unchanged") {}
};

}  // namespace rematlab
