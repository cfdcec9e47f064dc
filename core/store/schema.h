// The runs database's schema: versions, migrations, and the checks that keep RematLab from
// touching a file that is not its own.
#pragma once

#include <memory>
#include <string>

#include "store/sqlite_db.h"

namespace rematlab {

constexpr int kStoreSchemaVersion = 3;

// Opens `path` as a RematLab database: creates it when missing (if `create`), migrates an older
// schema in one transaction, turns on WAL and foreign keys. Throws InvalidInput("--db", …) for a
// missing file (when !create), a file that is not a RematLab database or one of a newer schema;
// such files are left byte for byte as they were.
std::unique_ptr<Database> open_store_database(const std::string& path, bool create);

// Tests only: a new database at an older schema version, as that version's code made it.
void create_store_database_at_version(const std::string& path, int version);

}  // namespace rematlab
