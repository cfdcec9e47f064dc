#include "store/schema.h"

#include <optional>
#include <vector>

#include "common/errors.h"
#include "common/posix_files.h"
#include "store/run_store.h"
#include "store/sqlite_header.h"

namespace rematlab {
namespace {

// "RMLB": written into the SQLite header so another program's database is never mistaken for ours.
constexpr int kApplicationId = 0x524D4C42;

// Migration N brings a database from version N to N + 1. Never edit a released migration:
// add another. (A data table: one list, as long as the schema's history.)
const std::vector<const char*>& migrations() {
  static const std::vector<const char*> list = {
      // 0 → 1: experiments, runs and their steps.
      R"sql(
      CREATE TABLE experiments (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        created TEXT NOT NULL,
        spec TEXT NOT NULL DEFAULT '{}'
      );
      CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        experiment_id INTEGER REFERENCES experiments(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        status TEXT NOT NULL,
        message TEXT NOT NULL DEFAULT '',
        config TEXT NOT NULL,
        summary TEXT NOT NULL DEFAULT '{}',
        started TEXT NOT NULL,
        ended TEXT,
        device TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        libtorch TEXT NOT NULL,
        tokens_per_s REAL,
        peak_bytes INTEGER,
        peak_activation_bytes INTEGER,
        final_loss REAL
      );
      CREATE TABLE steps (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        total_steps INTEGER NOT NULL,
        warmup INTEGER NOT NULL,
        loss REAL,
        grad_norm REAL,
        loss_scale REAL,
        skipped INTEGER NOT NULL,
        step_ms REAL,
        forward_ms REAL,
        backward_ms REAL,
        optimizer_ms REAL,
        tokens_per_s REAL,
        current_bytes INTEGER,
        baseline_bytes INTEGER,
        peak_bytes INTEGER,
        peak_activation_bytes INTEGER,
        saved_activation_bytes INTEGER,
        offloaded_peak_bytes INTEGER,
        offload_wait_ms REAL,
        rss_bytes INTEGER,
        rss_peak_bytes INTEGER,
        checkpoint_interval INTEGER,
        recomputed_segments INTEGER,
        PRIMARY KEY (run_id, step)
      ) WITHOUT ROWID;
      )sql",
      // 1 → 2: memory timelines, max-batch probes, and the process start time that tells a
      // reused pid from the process that wrote a run.
      R"sql(
      CREATE TABLE timelines (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        point INTEGER NOT NULL,
        time_ms REAL NOT NULL,
        bytes INTEGER NOT NULL,
        phase TEXT NOT NULL,
        PRIMARY KEY (run_id, point)
      ) WITHOUT ROWID;
      CREATE TABLE probes (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        probe INTEGER NOT NULL,
        batch INTEGER NOT NULL,
        status TEXT NOT NULL,
        peak_bytes INTEGER NOT NULL,
        PRIMARY KEY (run_id, probe)
      ) WITHOUT ROWID;
      ALTER TABLE runs ADD COLUMN pid_start INTEGER NOT NULL DEFAULT 0;
      CREATE INDEX runs_by_experiment ON runs(experiment_id);
      CREATE INDEX runs_by_status ON runs(status);
      )sql",
      // 2 → 3: CUDA memory beside the allocator's live bytes; 0 for CPU runs and older steps.
      R"sql(
      ALTER TABLE steps ADD COLUMN reserved_bytes INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE steps ADD COLUMN device_used_bytes INTEGER NOT NULL DEFAULT 0;
      )sql",
      // 3 → 4: what a run did apart from what was asked of it. A max-batch run's config held the
      // batch the spec gave, while the batch it trained at hid in its summary (where "batch",
      // "steps" and other config keys shadowed each other in reports). Now the config is what
      // the run trained with, `request` what was asked (the search's budget and range), and the
      // summary only what was measured (`steps_completed` instead of "steps"); a search that found
      // no batch (or was stopped) trained at none: batch 0, as new runs record it. Also: the peak
      // FLOP/s each device, precision and thread count is measured against, with its date.
      R"sql(
      ALTER TABLE runs ADD COLUMN request TEXT NOT NULL DEFAULT '{}';
      UPDATE runs SET request = json_object('max_batch', json_object(
            'budget_bytes', json_extract(runs.config, '$.budget_bytes'),
            'limit', coalesce(json_extract(e.spec, '$.max_batch.limit'), 1024),
            'probe_steps', coalesce(json_extract(e.spec, '$.max_batch.probe_steps'), 2)))
        FROM experiments e
        WHERE e.id = runs.experiment_id AND json_type(e.spec, '$.max_batch') = 'object';
      UPDATE runs SET config = json_set(config, '$.batch', json_extract(summary, '$.batch'))
        WHERE json_valid(summary) AND json_type(summary, '$.batch') = 'integer';
      UPDATE runs SET summary = json_remove(
            json_set(summary, '$.steps_completed', json_extract(summary, '$.steps')),
            '$.steps', '$.status', '$.status_message', '$.device', '$.precision', '$.attention',
            '$.checkpoint', '$.offload', '$.layers', '$.d_model', '$.heads', '$.seq_len',
            '$.vocab', '$.batch', '$.accum', '$.run_id', '$.timeline')
        WHERE json_valid(summary) AND json_type(summary, '$.steps') = 'integer';
      UPDATE runs SET config = json_set(config, '$.batch', 0)
        WHERE json_type(request, '$.max_batch') = 'object'
          AND coalesce(json_extract(summary, '$.steps_completed'), 0) = 0;
      CREATE TABLE peaks (
        host TEXT NOT NULL,
        device TEXT NOT NULL,
        precision TEXT NOT NULL,
        threads INTEGER NOT NULL,
        flops REAL NOT NULL,
        measured TEXT NOT NULL,
        method TEXT NOT NULL,
        PRIMARY KEY (host, device, precision, threads)
      ) WITHOUT ROWID;
      )sql",
      // 4 → 5: data-parallel communication per step (0 for runs of one process and older steps).
      // Also the rule 3 → 4 applies to searches that found no batch, again: builds at schema 4
      // before that rule still recorded such a search with the batch its spec gave. And a run
      // that measured nothing has no figures in the runs table, rather than zeros.
      R"sql(
      ALTER TABLE steps ADD COLUMN comm_ms REAL NOT NULL DEFAULT 0;
      ALTER TABLE steps ADD COLUMN comm_wait_ms REAL NOT NULL DEFAULT 0;
      UPDATE runs SET config = json_set(config, '$.batch', 0)
        WHERE json_valid(config) AND json_valid(request)
          AND json_type(request, '$.max_batch') = 'object'
          AND (summary IS NULL OR NOT json_valid(summary)
               OR coalesce(json_extract(summary, '$.steps_completed'), 0) = 0);
      UPDATE runs SET tokens_per_s = NULL, peak_bytes = NULL, peak_activation_bytes = NULL,
                      final_loss = NULL
        WHERE json_valid(summary) AND json_type(summary, '$.steps_completed') = 'integer'
          AND json_extract(summary, '$.steps_completed') = 0;
      )sql",
      // 5 → 6: the process that records a run beside the one that trains it. A sweep's worker
      // trains on one host while the coordinator, maybe on another, records: a run whose
      // recorder is gone will never be finished, whether or not its trainer can be checked.
      // Empty for runs recorded by the process that trained them. Also again the rule 4 → 5 for
      // figures of runs that measured nothing: builds at schema 5 before it still wrote zeros.
      // And chain profiles (what `plan:` plans from), kept per configuration and reused.
      R"sql(
      CREATE TABLE profiles (
        key TEXT PRIMARY KEY,
        costs TEXT NOT NULL,
        profile_ms REAL NOT NULL,
        measured TEXT NOT NULL
      ) WITHOUT ROWID;
      ALTER TABLE runs ADD COLUMN recorder_host TEXT NOT NULL DEFAULT '';
      ALTER TABLE runs ADD COLUMN recorder_pid INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE runs ADD COLUMN recorder_start INTEGER NOT NULL DEFAULT 0;
      UPDATE runs SET tokens_per_s = NULL, peak_bytes = NULL, peak_activation_bytes = NULL,
                      final_loss = NULL
        WHERE json_valid(summary) AND json_type(summary, '$.steps_completed') = 'integer'
          AND json_extract(summary, '$.steps_completed') = 0;
      )sql",
      // 6 → 7: fully sharded parameters count the all-gathers of parameter units per step, and
      // those recomputation added.
      R"sql(
      ALTER TABLE steps ADD COLUMN parameter_gathers INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE steps ADD COLUMN recompute_gathers INTEGER NOT NULL DEFAULT 0;
      )sql",
      // 7 → 8: a pipeline stage's waits on its neighbours, apart: until a neighbour reached the
      // message (the bubble), and while it passed (the transfer).
      R"sql(
      ALTER TABLE steps ADD COLUMN bubble_ms REAL NOT NULL DEFAULT 0;
      ALTER TABLE steps ADD COLUMN transfer_ms REAL NOT NULL DEFAULT 0;
      )sql",
      // 8 → 9: a mixture of experts' balance loss each step; not measured before (no run had
      // experts). A pipeline's steps that 7 → 8 gave zero waits were recorded before the waits
      // were: unmeasured, not measured as none (a stage that waited for nothing at all still
      // records its sends' passage).
      R"sql(
      ALTER TABLE steps ADD COLUMN balance_loss REAL NOT NULL DEFAULT 'nan';
      UPDATE steps SET bubble_ms = 'nan', transfer_ms = 'nan'
        WHERE bubble_ms = 0 AND transfer_ms = 0
          AND run_id IN (SELECT id FROM runs WHERE json_valid(config)
                           AND json_type(config, '$.pp') = 'integer'
                           AND json_extract(config, '$.pp') > 1);
      )sql",
      // 9 → 10: a mixture of experts' load (its busiest expert's rows over its share; not
      // measured before) and the time expert parallelism's all-to-all exchanges blocked (none
      // before: no run had it).
      R"sql(
      ALTER TABLE steps ADD COLUMN expert_load REAL NOT NULL DEFAULT 'nan';
      ALTER TABLE steps ADD COLUMN dispatch_ms REAL NOT NULL DEFAULT 0;
      )sql",
      // 10 → 11: expert parallelism's rank load (the rows a rank's experts took over its own
      // tokens' rows; not measured before).
      R"sql(
      ALTER TABLE steps ADD COLUMN expert_rank_load REAL NOT NULL DEFAULT 'nan';
      )sql",
      // 11 → 12: expert parallelism's load of one block alone, the busiest (not measured
      // before).
      R"sql(
      ALTER TABLE steps ADD COLUMN expert_block_load REAL NOT NULL DEFAULT 'nan';
      )sql",
  };
  return list;
}

int pragma_int(Database& db, const char* pragma) {
  Statement query(db, std::string("PRAGMA ") + pragma);
  return query.step() ? static_cast<int>(query.column_int(0)) : 0;
}

DatabaseRefused not_ours(const std::string& path, const std::string& why,
                         const std::string& detail = {}) {
  return DatabaseRefused(path, why, detail, "; it was left unchanged");
}

DatabaseRefused locked(const std::string& path) {
  return DatabaseRefused(path, "is locked by another program", "waited 5 s",
                         "; try again when it is done; it was left unchanged");
}

void migrate(Database& db, int to) {
  Transaction transaction(db);
  // Another process may have migrated between our check and the lock.
  const int current = pragma_int(db, "user_version");
  for (int version = current; version < to; ++version) db.exec(migrations().at(version));
  if (current < to) {
    db.exec("PRAGMA application_id = " + std::to_string(kApplicationId));
    db.exec("PRAGMA user_version = " + std::to_string(to));
  }
  transaction.commit();
}

// Whether another process holds one of SQLite's locks on the file (a connection in exclusive
// locking mode keeps no -shm file, only its lock): the bytes from 2^30 on, where SQLite locks.
bool held_by_sqlite(const std::string& path) {
  return files::locked_by_another_process(path, int64_t{1} << 30, 512);
}

DatabaseRefused damaged(const std::string& path, const std::string& detail) {
  return DatabaseRefused(path, "is a damaged RematLab database", detail,
                         "; copy what is still readable into a new file with `sqlite3 '" + path +
                             "' .recover | sqlite3 recovered.sqlite`; it was left unchanged");
}

// What the file's own header says, before SQLite opens it: another program's database, a newer
// schema and a file cut short are refused without a byte written beside them.
void check_header(const std::string& path, const std::optional<SqliteHeader>& header) {
  if (!header || header->application_id != kApplicationId) return;  // SQLite's checks follow
  if (header->user_version > kStoreSchemaVersion) {
    throw not_ours(path, "was written by a newer RematLab (schema " +
                             std::to_string(header->user_version) + "; this build knows up to " +
                             std::to_string(kStoreSchemaVersion) + ")");
  }
  const int64_t expected = header->page_size * header->page_count;
  const int64_t size = files::file_size(path);
  // A checkpoint writes page 1, with the grown page count, before the pages that grow the file:
  // while a -wal holds changes or another process has it open, a short file is not a cut one.
  const bool settled = files::file_size(path + "-wal") <= 0 && !held_by_sqlite(path);
  if (expected > 0 && size < expected && settled) {
    throw damaged(path, "the file holds " + std::to_string(size) + " of its " +
                            std::to_string(expected) + " bytes: it was cut short");
  }
}

// Before SQLite sees the path: every reason it could not be opened, as the user should hear it.
void check_location(const std::string& path, StoreAccess access, bool create) {
  if (path.empty()) throw InvalidInput("--db", "is empty");
  if (!files::is_valid_utf8(path)) throw InvalidInput("--db", "the path is not valid UTF-8");
  if (files::exists(path)) {
    if (files::is_directory(path)) throw DatabaseRefused(path, "is a folder");
    // A pipe would block the open, a device be written beside (a -journal next to /dev/null).
    if (!files::is_regular_file(path)) {
      throw DatabaseRefused(path, "is not a regular file");
    }
    if (!files::readable(path)) throw DatabaseRefused(path, "cannot be read");
    // Writing in WAL mode also creates the -wal and -shm files beside the database.
    if (access == StoreAccess::kReadWrite &&
        (!files::writable(path) || !files::writable(files::parent_directory(path)))) {
      throw ReadOnlyDatabase(path);
    }
    return;
  }
  if (!create || access == StoreAccess::kReadOnly) {
    throw InvalidInput("--db", "no database at '" + path + "'");
  }
  const std::string folder = files::parent_directory(path);
  if (!files::is_directory(folder)) {
    throw InvalidInput("--db",
                       "cannot create '" + path + "': the folder '" + folder + "' does not exist");
  }
  if (!files::writable(folder)) {
    throw InvalidInput("--db",
                       "cannot create '" + path + "': the folder '" + folder + "' is not writable");
  }
}

// Read-only. A write-protected database that nobody is writing (no -wal with content, no -shm:
// a writer keeps both) is opened immutable: no locks, and no -wal or -shm files made beside it
// (SQLite would give them the database's permissions, and a write-protected -shm would lock out
// every later writer once the database is writable again). A writable one that nobody has open
// is opened query-only: with SQLite's locks, so a writer may start meanwhile, and as the last
// connection it removes the -wal and -shm it made. Otherwise it is read as any reader does,
// through the -wal and -shm files (waiting for a lock, or saying it is locked); where they cannot
// be made (a read-only folder) it is opened immutable unless its -wal holds changes, which are
// refused rather than read past: their committed runs would be missing.
std::unique_ptr<Database> open_for_reading(const std::string& path) {
  const bool wal_holds_changes = files::file_size(path + "-wal") > 0;
  const bool quiet = !wal_holds_changes && !files::exists(path + "-shm") && !held_by_sqlite(path);
  const bool writable = files::writable(path) && files::writable(files::parent_directory(path));
  if (quiet) {
    return std::make_unique<Database>(
        path, writable ? Database::Mode::kQueryOnly : Database::Mode::kImmutable);
  }
  auto db = std::make_unique<Database>(path, Database::Mode::kReadOnly);
  try {
    pragma_int(*db, "application_id");
    return db;
  } catch (const StoreError& error) {
    if (error.code() != SQLITE_READONLY && error.code() != SQLITE_CANTOPEN) throw;
  }
  if (wal_holds_changes) {
    throw InvalidInput("--db", "'" + path + "' has changes in its write-ahead log ('" + path +
                                   "-wal') that cannot be read where its folder is read-only; "
                                   "open it once where it can be written; it was left unchanged");
  }
  return std::make_unique<Database>(path, Database::Mode::kImmutable);
}

}  // namespace

std::unique_ptr<Database> open_store_database(const std::string& path, StoreAccess access,
                                              bool create) {
  check_location(path, access, create);
  const bool existed = files::exists(path);
  const std::optional<SqliteHeader> header = read_sqlite_header(path);
  check_header(path, header);
  const bool ours = header && header->application_id == kApplicationId;
  const bool reading = access == StoreAccess::kReadOnly;
  std::unique_ptr<Database> db;
  int application_id = 0;
  int version = 0;
  int objects = 0;
  try {
    db = reading ? open_for_reading(path)
                 : std::make_unique<Database>(path, existed ? Database::Mode::kReadWrite
                                                            : Database::Mode::kReadWriteCreate);
    if (!reading && db->read_only()) throw ReadOnlyDatabase(path);
    application_id = pragma_int(*db, "application_id");
    version = pragma_int(*db, "user_version");
    Statement count(*db, "SELECT count(*) FROM sqlite_master");
    objects = count.step() ? static_cast<int>(count.column_int(0)) : 0;
  } catch (const StoreError& error) {
    if (error.locked()) throw locked(path);
    const std::string detail = error.code() ? sqlite3_errstr(error.code()) : error.what();
    if (ours) throw damaged(path, "SQLite says: " + detail);
    throw not_ours(path, "is not a RematLab database", "SQLite says: " + detail);
  }
  const bool blank = application_id == 0 && version == 0 && objects == 0;
  if (blank && existed && !create) {
    // Only a new database may start blank: an existing empty one is some other program's.
    throw not_ours(path, "is an empty SQLite database, not a RematLab database");
  }
  if (!blank && application_id != kApplicationId) {
    throw not_ours(path, "is an SQLite database of another program, not a RematLab database");
  }
  if (version > kStoreSchemaVersion) {
    throw not_ours(path, "was written by a newer RematLab (schema " + std::to_string(version) +
                             "; this build knows up to " + std::to_string(kStoreSchemaVersion) +
                             ")");
  }
  if (reading) {
    if (blank) throw not_ours(path, "is empty, not a RematLab database yet");
    if (version < kStoreSchemaVersion) {
      throw not_ours(path, "has schema " + std::to_string(version) + ", older than this build's " +
                               std::to_string(kStoreSchemaVersion) +
                               ": `rematlab-cli upgrade --db FILE` upgrades it");
    }
    return db;
  }
  try {
    db->exec("PRAGMA journal_mode = WAL");
    // In WAL mode NORMAL loses no committed transaction on a process crash, only on power loss.
    db->exec("PRAGMA synchronous = NORMAL");
    db->exec("PRAGMA foreign_keys = ON");
    if (version < kStoreSchemaVersion) migrate(*db, kStoreSchemaVersion);
  } catch (const StoreError& error) {
    if (error.locked()) throw locked(path);
    throw;
  }
  return db;
}

void check_database_path(const std::string& path) {
  check_location(path, StoreAccess::kReadWrite, /*create=*/true);
  if (!files::exists(path) || files::file_size(path) == 0) return;
  const std::optional<SqliteHeader> header = read_sqlite_header(path);
  if (!header) throw not_ours(path, "is not a RematLab database", "not an SQLite file");
  const bool blank = header->application_id == 0 && header->user_version == 0;
  if (!blank && header->application_id != kApplicationId) {
    throw not_ours(path, "is an SQLite database of another program, not a RematLab database");
  }
  check_header(path, header);
}

void create_store_database_at_version(const std::string& path, int version) {
  Database db(path, Database::Mode::kReadWriteCreate);
  migrate(db, version);
}

}  // namespace rematlab
