// `upgrade`: brings an existing runs database to this build's schema (the reports read only, and
// refuse an older schema rather than migrate it behind the user's back). Opening it for writing
// also marks the runs of writers that are gone `interrupted`, as every writer does.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "common/errors.h"
#include "common/posix_files.h"
#include "store/run_store.h"
#include "store/schema.h"

namespace rematlab::cli {

Command add_upgrade_command(CLI::App& app) {
  auto* command = app.add_subcommand("upgrade",
                                     "Bring a runs database to this build's schema (a backup first "
                                     "is wise: older builds cannot read it afterwards)");
  auto db = std::make_shared<std::string>(default_database_path());
  command->add_option("--db", *db, "Runs database")->capture_default_str();
  return {command, [db]() {
            // An empty file would be taken for a new database and initialised: there is nothing
            // to upgrade, and a typo'd path should not leave a database behind.
            if (files::exists(*db) && !files::is_directory(*db) && files::file_size(*db) == 0) {
              throw InvalidInput("--db", "'" + *db +
                                             "' is empty: there is no database to upgrade; it "
                                             "was left unchanged");
            }
            const RunStore store(*db, StoreAccess::kReadWrite, /*create=*/false);
            std::cout << "'" << *db << "' is at schema " << kStoreSchemaVersion << "\n";
            return 0;
          }};
}

}  // namespace rematlab::cli
