// The runs database's schema: versions, migrations, and the checks that keep RematLab from
// touching a file that is not its own.
#pragma once

#include <memory>
#include <string>

#include "store/sqlite_db.h"
#include "store/store_access.h"

namespace rematlab {

constexpr int kStoreSchemaVersion = 12;

// Opens `path` as a RematLab database. kReadWrite: creates it when missing (if `create`), migrates
// an older schema in one transaction, turns on WAL and foreign keys. kReadOnly: opens it without
// writing a byte (an older schema is refused: reading it would need the migration).
// Throws InvalidInput("--db", …), one line a user can act on, for: a missing file or folder, a
// folder that cannot be written, a locked database, a file that is not a RematLab database, a
// newer schema; ReadOnlyDatabase for a write-protected file opened kReadWrite. Such files are
// left byte for byte as they were.
std::unique_ptr<Database> open_store_database(const std::string& path, StoreAccess access,
                                              bool create);

// Tests only: a new database at an older schema version, as that version's code made it.
void create_store_database_at_version(const std::string& path, int version);

}  // namespace rematlab
