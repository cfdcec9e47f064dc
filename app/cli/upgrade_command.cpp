// `upgrade`: brings a runs database to this build's schema and nothing else (the reports read
// only, and refuse an older schema rather than migrate it behind the user's back).
#include <iostream>
#include <memory>

#include "cli/commands.h"
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
            const RunStore store(*db, StoreAccess::kReadWrite, /*create=*/false);
            std::cout << "'" << *db << "' is at schema " << kStoreSchemaVersion << "\n";
            return 0;
          }};
}

}  // namespace rematlab::cli
