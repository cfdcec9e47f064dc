// The runs database: schema and migrations, refusals, round trips, the one writer, recovery of
// interrupted runs, CSV. Every test works on a real SQLite file.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <future>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "common/errors.h"
#include "common/posix_files.h"
#include "common/process_identity.h"
#include "run/run_fields.h"
#include "runtime/runtime_info.h"
#include "scratch_dir.h"
#include "store/csv_export.h"
#include "store/peak_flops_registry.h"
#include "store/run_comparison.h"
#include "store/run_store.h"
#include "store/run_writer.h"
#include "store/schema.h"
#include "store/sqlite_db.h"
#include "store/step_fields.h"

namespace rematlab {
namespace {

// A fresh directory per test, removed with everything in it.
class TempDir {
 public:
  TempDir()
      : path_(files::join(files::temp_directory(), "rematlab-store-test-" +
                                                       std::to_string(::getpid()) + "-" +
                                                       std::to_string(counter_++))) {
    files::make_directories(path_);
  }
  ~TempDir() { files::remove_tree(path_); }
  std::string file(const std::string& name) const { return files::join(path_, name); }
  std::vector<std::string> names() const { return files::list(path_); }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

std::string pragma_text(const std::string& path, const std::string& pragma) {
  Database db(path, Database::Mode::kReadOnly);
  Statement query(db, "PRAGMA " + pragma);
  return query.step() ? query.column_text(0) : "";
}

StepMetrics sample_step(int64_t index) {
  StepMetrics step;
  step.step = index;
  step.total_steps = 3;
  step.warmup = index == 0;
  step.loss = 5.5 - 0.123456789012345 * static_cast<double>(index);
  step.grad_norm = 1.0 / 3.0;
  step.step_ms = 12.5 + static_cast<double>(index);
  step.tokens_per_s = 40000.25;
  step.peak_bytes = 5000000 + index;
  step.baseline_bytes = 1000000;
  step.peak_activation_bytes = 4000000 + index;
  step.offloaded_peak_bytes = 262144;
  step.checkpoint_interval = 2;
  step.recomputed_segments = 3;
  return step;
}

RunSummary sample_summary(const RunConfig& config) {
  RunSummary summary;
  summary.config = config;
  for (int i = 0; i < 3; ++i) summary.steps.push_back(sample_step(i));
  summary.summarize();
  summary.timeline = {{0.0, 100, MemoryPhase::kForward},
                      {1.5, 300, MemoryPhase::kRecompute},
                      {2.0, 50, MemoryPhase::kOptimizer}};
  summary.timeline_step = 1;
  return summary;
}

TEST(Store, NewDatabaseHasTheSchemaWalAndForeignKeys) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  { RunStore store(path); }
  EXPECT_EQ(pragma_text(path, "user_version"), std::to_string(kStoreSchemaVersion));
  EXPECT_EQ(pragma_text(path, "journal_mode"), "wal");
  Database db(path, Database::Mode::kReadWrite);
  Statement tables(db,
                   "SELECT group_concat(name) FROM (SELECT name FROM sqlite_master "
                   "WHERE type = 'table' ORDER BY name)");
  ASSERT_TRUE(tables.step());
  EXPECT_EQ(tables.column_text(0), "experiments,peaks,probes,profiles,runs,steps,timelines");
}

TEST(Store, StepFieldsAreTheStepsTableColumns) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  { RunStore store(path); }
  Database db(path, Database::Mode::kReadOnly);
  Statement columns(db, "SELECT name FROM pragma_table_info('steps')");
  std::vector<std::string> names;
  while (columns.step()) names.push_back(columns.column_text(0));
  std::vector<std::string> expected = {"run_id"};
  for (const StepField& field : step_fields()) expected.push_back(field.name);
  EXPECT_EQ(names, expected);
}

void migrates_keeping_runs(int from) {
  TempDir dir;
  const std::string path = dir.file("old.sqlite");
  create_store_database_at_version(path, from);
  {
    Database db(path, Database::Mode::kReadWrite);
    db.exec(
        "INSERT INTO experiments (name, created) VALUES ('old', '2026-01-01T00:00:00Z');"
        "INSERT INTO runs (experiment_id, name, status, config, summary, started, device, host,"
        " pid, libtorch) VALUES (1, 'old run', 'ok', '{\"batch\": 4}', '{\"peak_bytes\": 7}',"
        " '2026-01-01T00:00:00Z', 'cpu', 'h', 1, '2.0');"
        "INSERT INTO steps (run_id, step, total_steps, warmup, skipped, loss)"
        " VALUES (1, 0, 1, 0, 0, 2.5);"
        // A run that measured nothing, with the zeros builds at the previous schema wrote.
        "INSERT INTO runs (experiment_id, name, status, config, summary, started, device, host,"
        " pid, libtorch, tokens_per_s, peak_bytes, peak_activation_bytes, final_loss)"
        " VALUES (1, 'stopped at once', 'cancelled', '{\"batch\": 4}',"
        " '{\"steps_completed\": 0}', '2026-01-01T00:00:00Z', 'cpu', 'h', 1, '2.0', 0, 0, 0, 0);");
  }
  RunStore store(path);
  EXPECT_EQ(pragma_text(path, "user_version"), std::to_string(kStoreSchemaVersion));
  {
    Database db(path, Database::Mode::kReadOnly);
    Statement figures(
        db,
        "SELECT tokens_per_s IS NULL AND peak_bytes IS NULL AND "
        "peak_activation_bytes IS NULL AND final_loss IS NULL FROM runs WHERE id = 2");
    ASSERT_TRUE(figures.step());
    if (from <= 5) {
      EXPECT_EQ(figures.column_int(0), 1) << "zeros that read as measurements were kept";
    }
  }
  const RunRecord run = store.run(1);
  EXPECT_EQ(run.name, "old run");
  EXPECT_EQ(run.experiment, "old");
  EXPECT_EQ(run.config.batch, 4);
  EXPECT_EQ(run.result.peak_bytes, 7);
  ASSERT_EQ(store.steps(1).size(), 1u);
  EXPECT_EQ(store.steps(1)[0].loss, 2.5);
  EXPECT_EQ(store.steps(1)[0].reserved_bytes, 0);  // the columns schema 3 added
  EXPECT_EQ(store.steps(1)[0].device_used_bytes, 0);
  EXPECT_EQ(store.steps(1)[0].parameter_gathers, 0);  // the columns schema 7 added
  EXPECT_EQ(store.steps(1)[0].recompute_gathers, 0);
  EXPECT_TRUE(std::isnan(store.steps(1)[0].balance_loss));       // schema 9: no run had experts
  EXPECT_TRUE(std::isnan(store.steps(1)[0].expert_load));        // schema 10: nor a load
  EXPECT_TRUE(std::isnan(store.steps(1)[0].expert_rank_load));   // schema 11: nor a rank load
  EXPECT_TRUE(std::isnan(store.steps(1)[0].expert_block_load));  // schema 12: nor a block's
  EXPECT_EQ(store.steps(1)[0].dispatch_ms, 0.0);
  EXPECT_TRUE(store.timeline(1).empty());
  EXPECT_EQ(store.integrity_check(), "ok");
}

// From the previous version, and from 5: migration 5 → 6 clears the zeros a run that measured
// nothing was recorded with, which must still happen when later migrations follow it.
TEST(Store, MigratesThePreviousVersionKeepingItsRuns) {
  for (const int from : {kStoreSchemaVersion - 1, 5}) {
    SCOPED_TRACE("from schema " + std::to_string(from));
    migrates_keeping_runs(from);
  }
}

// Schema 8's zero waits of a pipeline's steps recorded before 8 read as unmeasured from 9 on;
// waits schema 8 measured stay, and so does a run that was no pipeline.
TEST(Store, APipelinesStepsWithoutWaitsReadAsUnmeasured) {
  TempDir dir;
  const std::string path = dir.file("eight.sqlite");
  create_store_database_at_version(path, 8);
  {
    Database db(path, Database::Mode::kReadWrite);
    for (const char* config : {"{\"pp\": 2}", "{\"pp\": 2}", "{\"batch\": 4}"}) {
      Statement insert(db,
                       "INSERT INTO runs (name, status, config, summary, started, device, host,"
                       " pid, libtorch) VALUES ('r', 'ok', ?, '{}', '2026-01-01T00:00:00Z', 'cpu',"
                       " 'h', 1, '2.0')");
      insert.bind(1, std::string(config));
      insert.run();
    }
    db.exec(
        "INSERT INTO steps (run_id, step, total_steps, warmup, skipped, loss, bubble_ms,"
        " transfer_ms) VALUES (1, 0, 1, 0, 0, 2.5, 0, 0), (2, 0, 1, 0, 0, 2.5, 3.5, 0.25),"
        " (3, 0, 1, 0, 0, 2.5, 0, 0);");
  }
  RunStore store(path);
  EXPECT_TRUE(std::isnan(store.steps(1)[0].bubble_ms));
  EXPECT_TRUE(std::isnan(store.steps(1)[0].transfer_ms));
  EXPECT_EQ(store.steps(2)[0].bubble_ms, 3.5);
  EXPECT_EQ(store.steps(2)[0].transfer_ms, 0.25);
  EXPECT_EQ(store.steps(3)[0].bubble_ms, 0.0);
  EXPECT_TRUE(std::isnan(store.steps(3)[0].balance_loss));
}

TEST(Store, RefusesAFileThatIsNotADatabaseAndLeavesItAlone) {
  TempDir dir;
  const std::string path = dir.file("notes.txt");
  std::ofstream(path) << "these are my notes, not a database\n";
  const std::string before = testing::slurp(path);
  try {
    RunStore store(path);
    FAIL() << "a text file was accepted";
  } catch (const InvalidInput& error) {
    EXPECT_EQ(error.field(), "--db");
    EXPECT_NE(std::string(error.what()).find("not a RematLab database"), std::string::npos);
  }
  EXPECT_EQ(testing::slurp(path), before);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"notes.txt"});  // no -wal, no -journal
}

TEST(Store, RefusesAnotherProgramsSqliteDatabase) {
  TempDir dir;
  const std::string path = dir.file("other.sqlite");
  {
    Database db(path, Database::Mode::kReadWriteCreate);
    db.exec("CREATE TABLE invoices (id INTEGER PRIMARY KEY); INSERT INTO invoices VALUES (1);");
  }
  const std::string before = testing::slurp(path);
  EXPECT_THROW(RunStore store(path), InvalidInput);
  EXPECT_EQ(testing::slurp(path), before);
}

// A RematLab database cut short (a copy interrupted halfway) is said to be damaged, with how to
// save what is readable, not called another program's file.
TEST(Store, ATruncatedDatabaseIsCalledDamagedAndLeftAlone) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  {
    RunStore store(path);
    RunWriter writer(path);
    RunConfig config;
    for (int i = 0; i < 20; ++i) writer.begin_run(std::nullopt, "run " + std::to_string(i), config);
  }
  {
    Database db(path, Database::Mode::kReadWrite);
    db.exec("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE;");
  }
  const std::string whole = testing::slurp(path);
  ASSERT_GT(whole.size(), 8192u);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << whole.substr(0, whole.size() / 2);
  const std::string cut = testing::slurp(path);
  for (const StoreAccess access : {StoreAccess::kReadWrite, StoreAccess::kReadOnly}) {
    try {
      RunStore store(path, access, false);
      ADD_FAILURE() << "a truncated database opened";
    } catch (const InvalidInput& error) {
      EXPECT_NE(std::string(error.what()).find("damaged RematLab database"), std::string::npos)
          << error.what();
      EXPECT_NE(std::string(error.what()).find(".recover"), std::string::npos) << error.what();
    }
  }
  EXPECT_THROW(check_database_path(path), InvalidInput);
  EXPECT_EQ(testing::slurp(path), cut);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"runs.sqlite"});
}

// Only a database this build creates may start blank: another program's empty SQLite file is not
// initialised by a command that does not create (upgrade), nor by the writer.
TEST(Store, AnEmptySqliteDatabaseIsNotTakenForOneToUpgrade) {
  TempDir dir;
  const std::string path = dir.file("empty.sqlite");
  {
    Database db(path, Database::Mode::kReadWriteCreate);
    db.exec("VACUUM");
  }
  const std::string before = testing::slurp(path);
  ASSERT_GT(before.size(), 0u) << "no SQLite header was written";
  try {
    RunStore store(path, StoreAccess::kReadWrite, /*create=*/false);
    ADD_FAILURE() << "an empty SQLite file was initialised";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("empty SQLite database"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(testing::slurp(path), before);
}

// What rank 0 checks before the rendezvous: everything that would refuse the database, with
// nothing created.
TEST(Store, CheckingADatabasePathCreatesNothing) {
  TempDir dir;
  EXPECT_NO_THROW(check_database_path(dir.file("new.sqlite")));
  EXPECT_TRUE(dir.names().empty());
  EXPECT_THROW(check_database_path(dir.file("missing/new.sqlite")), InvalidInput);
  std::ofstream(dir.file("notes.txt")) << "not a database\n";
  EXPECT_THROW(check_database_path(dir.file("notes.txt")), InvalidInput);
  {
    Database other(dir.file("other.sqlite"), Database::Mode::kReadWriteCreate);
    other.exec("PRAGMA application_id = 7; CREATE TABLE t (x);");
  }
  try {
    check_database_path(dir.file("other.sqlite"));
    ADD_FAILURE() << "another program's database was accepted";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("another program"), std::string::npos);
  }
  { RunStore ours(dir.file("ours.sqlite")); }
  EXPECT_NO_THROW(check_database_path(dir.file("ours.sqlite")));
}

// A quiet database (nobody has it open) is read in place: no -wal or -shm left beside it.
TEST(Store, ReadingAQuietDatabaseLeavesNoFilesBesideIt) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  {
    RunStore store(path);
    RunWriter writer(path);
    writer.begin_run(std::nullopt, "one", RunConfig{});
  }
  ASSERT_EQ(dir.names(), std::vector<std::string>{"runs.sqlite"}) << "a writer left its files";
  const std::string before = testing::slurp(path);
  {
    RunStore reader(path, StoreAccess::kReadOnly, false);
    EXPECT_EQ(reader.runs().size(), 1u);
  }
  EXPECT_EQ(dir.names(), std::vector<std::string>{"runs.sqlite"});
  EXPECT_EQ(testing::slurp(path), before);
}

// A reader of a database nobody had open still takes SQLite's locks: a writer that starts, writes,
// checkpoints and ends while it is open is read correctly afterwards (an immutable reader would
// read the rewritten file as it was, or as malformed).
TEST(Store, AReaderOfAQuietDatabaseSeesWhatAWriterDidMeanwhile) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  {
    RunStore store(path);
    RunWriter writer(path);
    writer.begin_run(std::nullopt, "before", RunConfig{});
  }
  RunStore reader(path, StoreAccess::kReadOnly, false);
  ASSERT_EQ(reader.runs().size(), 1u);
  {
    RunWriter writer(path);
    for (int i = 0; i < 200; ++i) writer.begin_run(std::nullopt, "meanwhile", RunConfig{});
    writer.flush();
    Database db(path, Database::Mode::kReadWrite);
    db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  }
  EXPECT_EQ(reader.runs().size(), 201u);
  EXPECT_EQ(reader.integrity_check(), "ok");
}

// The default database's folder is made when a database is created there, not when its path is
// only named (every command names it).
TEST(Store, TheDefaultDatabasesFolderIsMadeOnlyWhenItIsCreated) {
  TempDir dir;
  const std::string data = dir.file("data");
  const char* saved = std::getenv("XDG_DATA_HOME");
  const std::string saved_value = saved ? saved : "";
  ::setenv("XDG_DATA_HOME", data.c_str(), 1);
  ::unsetenv("REMATLAB_DB");
  const std::string path = default_database_path();
  EXPECT_FALSE(files::exists(data));
  { RunStore store(path); }
  EXPECT_TRUE(files::exists(path));
  if (saved) {
    ::setenv("XDG_DATA_HOME", saved_value.c_str(), 1);
  } else {
    ::unsetenv("XDG_DATA_HOME");
  }
}

TEST(Store, RefusesANewerSchemaAndLeavesItAlone) {
  TempDir dir;
  const std::string path = dir.file("future.sqlite");
  { RunStore store(path); }
  {
    Database db(path, Database::Mode::kReadWrite);
    db.exec("PRAGMA journal_mode = DELETE; PRAGMA user_version = 99;");
  }
  const std::string before = testing::slurp(path);
  try {
    RunStore store(path);
    FAIL() << "a newer schema was accepted";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("newer"), std::string::npos) << error.what();
  }
  EXPECT_EQ(testing::slurp(path), before);
}

TEST(Store, RunsAndStepsRoundTripExactly) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  RunStore store(path);
  RunConfig config;
  config.checkpoint = "every:2";
  config.batch = 6;
  const RunSummary summary = sample_summary(config);
  int64_t run_id = 0;
  {
    RunWriter writer(path);
    const int64_t experiment = writer.create_experiment("exp", {{"repeats", 1}});
    run_id = writer.begin_run(experiment, "every:2 b6", config);
    EXPECT_EQ(store.run(run_id).status, RunStatus::kRunning);
    for (const StepMetrics& step : summary.steps) writer.add_step(run_id, step);
    writer.finish_run(run_id, summary);
  }
  const RunRecord run = store.run(run_id);
  EXPECT_EQ(run.status, RunStatus::kOk);
  EXPECT_EQ(run.name, "every:2 b6");
  EXPECT_EQ(run.experiment, "exp");
  EXPECT_EQ(to_json(run.config), to_json(config));
  EXPECT_EQ(run.libtorch, rematlab::probe_runtime(false).torch_version);
  EXPECT_TRUE(std::regex_match(run.libtorch, std::regex(R"(\d+\.\d+\.\d+.*)"))) << run.libtorch;
  EXPECT_EQ(run.steps_recorded, 3);
  EXPECT_FALSE(run.ended.empty());
  EXPECT_TRUE(run.has_result);
  EXPECT_EQ(to_json(run.result), to_json(static_cast<const RunResult&>(summary)));

  const std::vector<StepMetrics> steps = store.steps(run_id);
  ASSERT_EQ(steps.size(), summary.steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    for (const StepField& field : step_fields()) {
      EXPECT_EQ(step_field_text(steps[i], field), step_field_text(summary.steps[i], field))
          << field.name << " of step " << i;
    }
  }
  const std::vector<TimelinePoint> timeline = store.timeline(run_id);
  ASSERT_EQ(timeline.size(), 3u);
  EXPECT_EQ(timeline[1].time_ms, 1.5);
  EXPECT_EQ(timeline[1].bytes, 300);
  EXPECT_EQ(timeline[1].phase, MemoryPhase::kRecompute);
}

TEST(Store, WriterCommitsQueuedStepsWithinItsInterval) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  RunStore store(path);
  RunWriter writer(path, {std::chrono::milliseconds(200)});
  const int64_t run_id = writer.begin_run(std::nullopt, "r", RunConfig{});
  writer.add_step(run_id, sample_step(0));  // no flush: only the interval commits it
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (store.steps(run_id).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(store.steps(run_id).size(), 1u);
}

TEST(Store, ReadersReadWhileTheWriterWrites) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  RunStore setup(path);
  RunWriter writer(path, {std::chrono::milliseconds(5)});
  const int64_t run_id = writer.begin_run(std::nullopt, "r", RunConfig{});
  std::atomic<bool> done{false};
  std::string reader_error;
  std::size_t last_seen = 0;
  bool monotonic = true;
  std::thread reader([&] {
    try {
      RunStore store(path, StoreAccess::kReadOnly, /*create=*/false);
      while (!done.load()) {
        const std::size_t seen = store.steps(run_id).size();
        monotonic = monotonic && seen >= last_seen;
        last_seen = seen;
      }
    } catch (const std::exception& error) {
      reader_error = error.what();
    }
  });
  for (int i = 0; i < 3000; ++i) {
    writer.add_step(run_id, sample_step(i));
    if (i % 500 == 0) writer.flush();
  }
  writer.flush();
  done = true;
  reader.join();
  EXPECT_EQ(reader_error, "");
  EXPECT_TRUE(monotonic);
  EXPECT_EQ(setup.steps(run_id).size(), 3000u);
}

TEST(Store, RunsOfAProcessThatIsGoneBecomeInterrupted) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  { RunStore store(path); }
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // reaped: the pid names no process now
  const ProcessIdentity self = current_process();
  {
    Database db(path, Database::Mode::kReadWrite);
    auto insert = [&](int64_t pid) {
      Statement run(db,
                    "INSERT INTO runs (name, status, config, started, device, host, pid, "
                    "libtorch) VALUES ('r', 'running', '{}', 'now', 'cpu', ?, ?, 'x')");
      run.bind(1, self.host).bind(2, pid).run();
      return db.last_insert_id();
    };
    const int64_t gone = insert(child);
    Statement step(db,
                   "INSERT INTO steps (run_id, step, total_steps, warmup, skipped) "
                   "VALUES (?, 0, 9, 0, 0)");
    step.bind(1, gone).run();
    insert(self.pid);
  }
  RunStore store(path);
  EXPECT_EQ(store.recovered_runs(), 1);
  EXPECT_EQ(store.run(1).status, RunStatus::kInterrupted);
  EXPECT_EQ(store.steps(1).size(), 1u);                 // what was committed stays
  EXPECT_EQ(store.run(2).status, RunStatus::kRunning);  // ours: still alive
}

TEST(Store, DeletingARunTakesItsStepsAlong) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  RunStore store(path);
  RunWriter writer(path);
  const int64_t keep = writer.begin_run(std::nullopt, "keep", RunConfig{});
  const int64_t drop = writer.begin_run(std::nullopt, "drop", RunConfig{});
  writer.add_step(keep, sample_step(0));
  writer.add_step(drop, sample_step(0));
  writer.finish_run(drop, sample_summary(RunConfig{}));
  store.delete_runs({drop});
  EXPECT_EQ(store.runs().size(), 1u);
  EXPECT_EQ(store.steps(keep).size(), 1u);
  Database db(path, Database::Mode::kReadOnly);
  Statement orphans(db, "SELECT count(*) FROM steps WHERE run_id = " + std::to_string(drop));
  ASSERT_TRUE(orphans.step());
  EXPECT_EQ(orphans.column_int(0), 0);
}

// RFC 4180 reader, enough to check what the writer produced.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1, std::vector<std::string>(1));
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        rows.back().back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        rows.back().back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().emplace_back();
    } else if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') {
      ++i;
      if (i + 1 < text.size()) rows.emplace_back(1);
    } else {
      rows.back().back() += c;
    }
  }
  return rows;
}

TEST(Store, CsvQuotesCommasQuotesAndLineBreaks) {
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("two\nlines"), "\"two\nlines\"");

  RunRecord run;
  run.id = 7;
  run.name = "every:2, \"the\" good one";
  run.status = RunStatus::kOk;
  run.config.batch = 8;
  run.config.checkpoint = "sublayer:1,2";
  run.has_result = true;
  run.result.steps_completed = 3;
  run.result.tokens_per_s = 1234.5678901234567;
  run.result.peak_bytes = 123456789;
  const auto rows = parse_csv(runs_csv({run}));
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_EQ(rows[0].size(), rows[1].size());
  auto column = [&](const std::string& name) {
    for (std::size_t c = 0; c < rows[0].size(); ++c) {
      if (rows[0][c] == name) return rows[1][c];
    }
    return std::string("<missing>");
  };
  EXPECT_EQ(column("name"), run.name);
  EXPECT_EQ(column("checkpoint"), "sublayer:1,2");
  EXPECT_EQ(std::stod(column("tokens_per_s")), 1234.5678901234567);  // full precision
  EXPECT_EQ(column("peak_bytes"), "123456789");
  EXPECT_EQ(column("tp"), "1");
  EXPECT_EQ(column("pp"), "1");  // the record keeps pp only above 1: one stage is still one
  EXPECT_EQ(column("virtual_stages"), "1");
  EXPECT_EQ(column("ep"), "1");  // the record keeps ep only above 1 too
  run.config.pp = 2;
  run.config.virtual_stages = 2;
  const auto interleaved = parse_csv(runs_csv({run}));
  ASSERT_EQ(interleaved.size(), 2u);
  const auto at = std::find(interleaved[0].begin(), interleaved[0].end(), "virtual_stages");
  ASSERT_NE(at, interleaved[0].end());
  EXPECT_EQ(interleaved[1][static_cast<std::size_t>(at - interleaved[0].begin())], "2");
  // A split given as a list, in one cell; blank where the rule split the blocks.
  const auto split = std::find(interleaved[0].begin(), interleaved[0].end(), "pp_split");
  ASSERT_NE(split, interleaved[0].end());
  EXPECT_EQ(interleaved[1][static_cast<std::size_t>(split - interleaved[0].begin())], "");
  run.config.pp_split = {1, 2, 2, 1};
  const auto given = parse_csv(runs_csv({run}));
  EXPECT_EQ(given[1][static_cast<std::size_t>(split - interleaved[0].begin())], "[1,2,2,1]");
}

RunRecord measured_run(int64_t id, const std::string& checkpoint, int64_t peak, double speed) {
  RunRecord run;
  run.id = id;
  run.name = checkpoint;
  run.status = RunStatus::kOk;
  run.config.checkpoint = checkpoint;
  run.has_result = true;
  run.result.steps_completed = 5;
  run.result.peak_bytes = peak;
  run.result.tokens_per_s = speed;
  return run;
}

TEST(Comparison, ShowsDifferencesAndRatiosToTheChosenBaseline) {
  const RunRecord a = measured_run(1, "none", 400, 1000.0);
  const RunRecord b = measured_run(2, "every:1", 100, 800.0);
  const RunComparison first = compare_runs({a, b});
  ASSERT_NE(first.row("checkpoint"), nullptr);
  EXPECT_EQ(first.row("batch"), nullptr);  // equal everywhere: not a difference
  EXPECT_DOUBLE_EQ(*first.ratio(1, "peak_bytes"), 0.25);
  EXPECT_DOUBLE_EQ(*first.ratio(1, "tokens_per_s"), 0.8);
  EXPECT_DOUBLE_EQ(*first.ratio(0, "tokens_per_s"), 1.0);
  const RunComparison second = compare_runs({a, b}, /*baseline=*/1);
  EXPECT_DOUBLE_EQ(*second.ratio(0, "peak_bytes"), 4.0);
  EXPECT_DOUBLE_EQ(*second.ratio(0, "tokens_per_s"), 1.25);
  EXPECT_TRUE(second.warnings.empty());
  EXPECT_EQ(second.row("pp"), nullptr);  // one stage each: no difference

  RunRecord staged = measured_run(3, "none", 300, 900.0);
  staged.config.pp = 2;
  const RunComparison pipelines = compare_runs({a, staged});
  ASSERT_NE(pipelines.row("pp"), nullptr);
  EXPECT_EQ(pipelines.row("pp")->values, (std::vector<nlohmann::json>{1, 2}));  // 1, not blank
}

TEST(Comparison, ParetoFrontLeavesOutDominatedAndUnfinishedRuns) {
  std::vector<RunRecord> runs = {
      measured_run(1, "none", 400, 1000.0),      // fastest: on the front
      measured_run(2, "every:1", 100, 800.0),    // least memory: on the front
      measured_run(3, "every:2", 200, 700.0),    // more memory and slower than #2: dominated
      measured_run(4, "selective", 300, 900.0),  // in between: on the front
      measured_run(5, "every:4", 50, 5000.0)};   // would beat all, but was cancelled
  runs[4].status = RunStatus::kCancelled;
  const RunComparison comparison = compare_runs(runs);
  EXPECT_EQ(comparison.pareto_front, (std::vector<std::size_t>{1, 3, 0}));  // by peak memory
  ASSERT_EQ(comparison.warnings.size(), 1u);
  EXPECT_NE(comparison.warnings[0].find("cancelled"), std::string::npos);
  EXPECT_EQ(pareto_front({{1.0, 1.0}, {1.0, 1.0}}), (std::vector<std::size_t>{0}));
  EXPECT_TRUE(pareto_front({}).empty());
}

TEST(Comparison, WarnsWhenTheRunsTrainDifferentModels) {
  RunRecord tiny = measured_run(1, "none", 10, 1.0);
  RunRecord small = measured_run(2, "none", 1000, 1.0);
  small.config.preset = "small";
  small.config.model.layers = 12;
  const RunComparison comparison = compare_runs({tiny, small});
  ASSERT_EQ(comparison.warnings.size(), 1u);
  EXPECT_NE(comparison.warnings[0].find("preset"), std::string::npos);
  EXPECT_NE(comparison.warnings[0].find("layers"), std::string::npos);
}

TEST(Comparison, RunsWithoutResultsHaveNoValuesAndNoRatios) {
  const RunRecord done = measured_run(1, "none", 400, 1000.0);
  RunRecord oom;
  oom.id = 2;
  oom.status = RunStatus::kOom;
  oom.request.max_batch = MaxBatchSpec{1 << 20, 64, 2};
  const RunComparison comparison = compare_runs({done, oom});
  EXPECT_TRUE(comparison.row("peak_bytes")->values[1].is_null());
  EXPECT_FALSE(comparison.ratio(1, "peak_bytes").has_value());
  ASSERT_NE(comparison.row("request_max_batch_budget_bytes"), nullptr);
  EXPECT_EQ(comparison.row("request_max_batch_budget_bytes")->values[1], 1 << 20);
}

TEST(Store, CsvIsWrittenWholeOrNotAtAll) {
  TempDir dir;
  write_file_atomically(dir.file("out.csv"), "a,b\r\n1,2\r\n");
  EXPECT_EQ(testing::slurp(dir.file("out.csv")), "a,b\r\n1,2\r\n");
  EXPECT_THROW(write_file_atomically(dir.file("no/such/dir/out.csv"), "x"), InvalidInput);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"out.csv"});  // no temporary left
}

// Schema 3 stored a max-batch run with the batch its spec gave (8) in `config`, the batch it
// trained at (28) only in `summary`, where "batch" and "steps" shadowed the config's keys.
TEST(Store, MigrationFromSchema3KeepsTheTrainedBatchApartFromTheRequest) {
  TempDir dir;
  const std::string path = dir.file("v3.sqlite");
  create_store_database_at_version(path, 3);
  {
    Database db(path, Database::Mode::kReadWrite);
    db.exec(R"sql(
      INSERT INTO experiments (name, created, spec) VALUES ('study', 'then',
        '{"base": {"preset": "small"}, "max_batch": {"budget": "384MiB", "limit": 64}}');
      INSERT INTO runs (experiment_id, name, status, config, summary, started, device, host, pid,
                        libtorch)
        VALUES (1, 'checkpoint=every:1', 'ok',
                '{"preset": "small", "batch": 8, "steps": 3, "budget_bytes": 402653184}',
                '{"status": "ok", "batch": 28, "steps": 3, "peak_bytes": 400000000,
                  "final_loss": null, "checkpoint": "every:1"}',
                'then', 'cpu', 'h', 1, '2.11');
      INSERT INTO runs (name, status, config, started, device, host, pid, libtorch)
        VALUES ('lone', 'failed', '{"batch": 4}', 'then', 'cpu', 'h', 1, '2.11');
      INSERT INTO runs (experiment_id, name, status, message, config, summary, started, device,
                        host, pid, libtorch)
        VALUES (1, 'checkpoint=none', 'oom', 'no batch fits the budget, not even 1',
                '{"preset": "small", "batch": 8, "budget_bytes": 402653184}',
                '{"status": "oom", "batch": 8, "steps": 0}', 'then', 'cpu', 'h', 1, '2.11');)sql");
  }
  RunStore store(path);
  const RunRecord searched = store.run(1);
  EXPECT_EQ(searched.config.batch, 28);  // what it trained at
  EXPECT_EQ(searched.config.steps, 3);
  ASSERT_TRUE(searched.request.max_batch.has_value());  // what was asked
  EXPECT_EQ(searched.request.max_batch->budget_bytes, 402653184);
  EXPECT_EQ(searched.request.max_batch->limit, 64);
  EXPECT_EQ(searched.result.steps_completed, 3);
  EXPECT_EQ(searched.result.peak_bytes, 400000000);
  EXPECT_TRUE(std::isnan(searched.result.final_loss));  // null was a non-finite value
  EXPECT_EQ(store.run(3).config.batch, 0);              // the search found none: it trained at none
  const RunRecord lone = store.run(2);
  EXPECT_EQ(lone.config.batch, 4);
  EXPECT_FALSE(lone.request.max_batch.has_value());
  EXPECT_FALSE(lone.has_result);
  const std::string csv = runs_csv(store.runs());
  const auto rows = parse_csv(csv);
  auto cell = [&](std::size_t row, const std::string& name) {
    for (std::size_t c = 0; c < rows[0].size(); ++c) {
      if (rows[0][c] == name) return rows[row][c];
    }
    return std::string("<missing>");
  };
  EXPECT_EQ(cell(1, "batch"), "28");
  EXPECT_EQ(cell(1, "request_max_batch_budget_bytes"), "402653184");
  EXPECT_EQ(cell(1, "steps_completed"), "3");
  EXPECT_EQ(cell(1, "final_loss"), "nan");
  EXPECT_EQ(cell(2, "peak_bytes"), "");  // never measured: blank, not 0
  EXPECT_EQ(cell(3, "batch"), "");
  // No two columns share a name, so none can hide another.
  std::set<std::string> names(rows[0].begin(), rows[0].end());
  EXPECT_EQ(names.size(), rows[0].size());
}

TEST(Store, MigrationFromSchema4RecordsASearchThatFoundNoBatchAsBatchZeroAndNoFigures) {
  // Builds at schema 4 before the rule of 3 → 4 recorded such searches with the spec's batch.
  TempDir dir;
  const std::string path = dir.file("v4.sqlite");
  create_store_database_at_version(path, 4);
  {
    Database db(path, Database::Mode::kReadWrite);
    db.exec(R"sql(
      INSERT INTO runs (name, status, message, config, request, summary, started, device, host,
                        pid, libtorch, peak_bytes, tokens_per_s)
        VALUES ('found none', 'oom', 'no batch fits the budget, not even 1',
                '{"preset": "small", "batch": 8}',
                '{"max_batch": {"budget_bytes": 1024, "limit": 64, "probe_steps": 2}}',
                '{"steps_completed": 0, "peak_bytes": 0}', 'then', 'cpu', 'h', 1, '2.11', 0, 0),
               ('found 28', 'ok', '', '{"preset": "small", "batch": 28}',
                '{"max_batch": {"budget_bytes": 402653184, "limit": 64, "probe_steps": 2}}',
                '{"steps_completed": 3, "peak_bytes": 400000000}', 'then', 'cpu', 'h', 1, '2.11',
                400000000, 1500.0),
               ('plain', 'oom', 'out of memory', '{"preset": "small", "batch": 8}', '{}',
                '{"steps_completed": 0}', 'then', 'cpu', 'h', 1, '2.11', 0, 0);)sql");
  }
  RunStore store(path);
  EXPECT_EQ(store.run(1).config.batch, 0);
  EXPECT_EQ(store.run(2).config.batch, 28);
  EXPECT_EQ(store.run(3).config.batch, 8);  // not a search: the batch it was asked to train at
  EXPECT_EQ(store.integrity_check(), "ok");
  // What measured nothing has no figures in the runs table; what measured keeps them.
  Database db(path, Database::Mode::kReadOnly);
  Statement nulls(db,
                  "SELECT group_concat(id) FROM runs WHERE peak_bytes IS NULL "
                  "AND tokens_per_s IS NULL");
  ASSERT_TRUE(nulls.step());
  EXPECT_EQ(nulls.column_text(0), "1,3");
}

TEST(Store, NonFiniteLossesRoundTripThroughTheDatabaseAndTheCsv) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  RunStore store(path);
  RunSummary summary = sample_summary(RunConfig{});
  summary.steps[0].loss = std::numeric_limits<double>::infinity();
  summary.steps[1].loss = -std::numeric_limits<double>::infinity();
  summary.steps[2].loss = std::numeric_limits<double>::quiet_NaN();
  summary.summarize();
  summary.status = RunStatus::kDiverged;
  int64_t run_id = 0;
  {
    RunWriter writer(path);
    run_id = writer.begin_run(std::nullopt, "diverged", RunConfig{});
    for (const StepMetrics& step : summary.steps) writer.add_step(run_id, step);
    writer.finish_run(run_id, summary);
  }
  const std::vector<StepMetrics> steps = store.steps(run_id);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].loss, std::numeric_limits<double>::infinity());
  EXPECT_EQ(steps[1].loss, -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(steps[2].loss));
  const RunRecord run = store.run(run_id);
  EXPECT_EQ(run.status, RunStatus::kDiverged);
  EXPECT_TRUE(std::isnan(run.result.final_loss));
  EXPECT_EQ(run.result.first_loss, std::numeric_limits<double>::infinity());
  const auto rows = parse_csv(steps_csv(store, {run}));
  std::size_t loss = 0;
  while (rows[0][loss] != "loss") ++loss;
  EXPECT_EQ(rows[1][loss], "inf");
  EXPECT_EQ(rows[2][loss], "-inf");
  EXPECT_EQ(rows[3][loss], "nan");
  // A value no writer stores, edited in by hand: bytes are not a number (sqlite reads a blob's
  // bytes as text, x'3132' as 12, which would pass for a loss).
  {
    Database db(path, Database::Mode::kReadWrite);
    db.exec("UPDATE steps SET loss = x'3132'");
  }
  for (const StepMetrics& step : store.steps(run_id)) EXPECT_TRUE(std::isnan(step.loss));
  // A summary figure of another type, edited in by hand (a run's and a rank's): unknown, and
  // every run of the list still reads.
  for (const char* value : {"'\"x\"'", "'[1]'", "'{}'"}) {
    {
      Database db(path, Database::Mode::kReadWrite);
      db.exec(std::string("UPDATE runs SET summary = json_set(summary, '$.final_loss', json(") +
              value + "), '$.ranks', json('[{\"rank\": 0, \"step_ms\": ' || " + value +
              " || '}]'))");
    }
    const std::vector<RunRecord> runs = store.runs();
    ASSERT_EQ(runs.size(), 1u) << value;
    EXPECT_TRUE(std::isnan(runs[0].result.final_loss)) << value;
    ASSERT_EQ(runs[0].result.ranks.size(), 1u) << value;
    EXPECT_TRUE(std::isnan(runs[0].result.ranks[0].step_ms)) << value;
    EXPECT_EQ(runs[0].result.first_loss, std::numeric_limits<double>::infinity()) << value;
  }
}

// A step that cannot be written (here: its run does not exist, so the foreign key refuses it)
// fails alone: the other runs' steps of the same batch commit, the cached insert statement keeps
// working, and the writer stays usable.
TEST(Writer, AFailingWriteDoesNotTakeTheBatchWithIt) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  RunStore store(path);
  RunWriter writer(path, {std::chrono::milliseconds(60000)});  // one batch, on flush
  const int64_t run = writer.begin_run(std::nullopt, "kept", RunConfig{});
  writer.add_step(run, sample_step(0));
  writer.add_step(run + 1000, sample_step(0));  // no such run
  writer.add_step(run, sample_step(1));
  EXPECT_NO_THROW(writer.flush());
  EXPECT_EQ(store.steps(run).size(), 2u);
  writer.add_step(run, sample_step(2));
  writer.flush();
  EXPECT_EQ(store.steps(run).size(), 3u);
}

TEST(Writer, TheRunWhoseWriteFailedEndsFailedWithTheReason) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  RunStore store(path);
  RunWriter writer(path, {std::chrono::milliseconds(60000)});
  const int64_t healthy = writer.begin_run(std::nullopt, "healthy", RunConfig{});
  const int64_t broken = writer.begin_run(std::nullopt, "broken", RunConfig{});
  // Every step of that run is refused by the database itself, as a broken row would be.
  Database(path, Database::Mode::kReadWrite)
      .exec("CREATE TRIGGER refuse_steps BEFORE INSERT ON steps WHEN NEW.run_id = " +
            std::to_string(broken) + " BEGIN SELECT RAISE(ABORT, 'injected failure'); END;");
  for (int i = 0; i < 3; ++i) {
    writer.add_step(healthy, sample_step(i));
    writer.add_step(broken, sample_step(i));
  }
  writer.flush();
  EXPECT_EQ(store.steps(healthy).size(), 3u);
  EXPECT_EQ(store.run(broken).status, RunStatus::kFailed);
  EXPECT_NE(store.run(broken).message.find("injected"), std::string::npos);
  // Its trainer finishes normally: the result is kept, the failure is not papered over.
  writer.finish_run(broken, sample_summary(RunConfig{}));
  writer.finish_run(healthy, sample_summary(RunConfig{}));
  EXPECT_EQ(store.run(broken).status, RunStatus::kFailed);
  EXPECT_TRUE(store.run(broken).has_result);
  EXPECT_EQ(store.run(healthy).status, RunStatus::kOk);
}

TEST(Store, ARunBeingTrainedCannotBeDeleted) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  RunStore store(path);
  RunWriter writer(path);
  const int64_t run = writer.begin_run(std::nullopt, "training", RunConfig{});
  try {
    store.delete_runs({run});
    ADD_FAILURE() << "a run this live process is training was deleted";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("is being trained"), std::string::npos);
  }
  EXPECT_EQ(store.runs().size(), 1u);
  writer.finish_run(run, sample_summary(RunConfig{}));
  store.delete_runs({run});
  EXPECT_TRUE(store.runs().empty());
}

// Reports open the database read-only: a write-protected copy reads, and not a byte changes.
TEST(Store, ReadOnlyAccessReadsAWriteProtectedCopyWithoutChangingIt) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  {
    RunStore store(path);
    RunWriter writer(path);
    const int64_t run = writer.begin_run(std::nullopt, "r", RunConfig{});
    writer.add_step(run, sample_step(0));
    writer.finish_run(run, sample_summary(RunConfig{}));
  }
  ASSERT_EQ(::chmod(path.c_str(), 0444), 0);
  const std::string before = testing::slurp(path);
  {
    RunStore store(path, StoreAccess::kReadOnly, /*create=*/false);
    EXPECT_TRUE(store.read_only());
    EXPECT_EQ(store.runs().size(), 1u);
    EXPECT_EQ(store.steps(1).size(), 1u);
    EXPECT_THROW(store.delete_runs({1}), InvalidInput);
  }
  EXPECT_EQ(testing::slurp(path), before);
  EXPECT_THROW(RunStore(dir.file("missing.sqlite"), StoreAccess::kReadOnly, false), InvalidInput);
}

TEST(Store, ReadOnlyAccessRefusesAnOlderSchemaInsteadOfMigratingIt) {
  TempDir dir;
  const std::string path = dir.file("old.sqlite");
  create_store_database_at_version(path, kStoreSchemaVersion - 1);
  const std::string before = testing::slurp(path);
  try {
    RunStore store(path, StoreAccess::kReadOnly, false);
    ADD_FAILURE() << "an older schema was read without its migration";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("upgrades it"), std::string::npos) << error.what();
  }
  EXPECT_EQ(testing::slurp(path), before);
}

TEST(Store, ALockedDatabaseIsReportedAsLocked) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  { RunStore store(path); }
  Database holder(path, Database::Mode::kReadWrite);
  holder.exec("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE;");
  try {
    RunStore store(path);
    ADD_FAILURE() << "opened a database another connection holds exclusively";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("locked"), std::string::npos) << error.what();
    EXPECT_EQ(std::string(error.what()).find("not a RematLab database"), std::string::npos);
  }
  holder.exec("COMMIT");
}

TEST(PeakFlops, MeasuredOnceThenReusedFromTheDatabaseWithItsDate) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  RunStore store(path);
  RunConfig config;
  config.threads = 1;
  resolve_peak_flops(config, &store);
  const double first = config.peak_flops;
  EXPECT_GT(first, 0.0);
  EXPECT_NE(config.peak_flops_source.find("first run here"), std::string::npos);
  RunConfig again;
  again.threads = 1;
  resolve_peak_flops(again, &store);
  EXPECT_EQ(again.peak_flops, first);  // not measured again: the kept figure, exactly
  EXPECT_NE(again.peak_flops_source.find("runs database: measured 20"), std::string::npos)
      << again.peak_flops_source;
  RunConfig other_threads;
  other_threads.threads = 2;
  EXPECT_FALSE(store.peak_flops(peak_flops_key(other_threads)));
  RunConfig given;
  given.peak_flops = 1e12;
  resolve_peak_flops(given, &store);
  EXPECT_EQ(given.peak_flops, 1e12);
  EXPECT_EQ(given.peak_flops_source, "given (--peak-flops)");
}

TEST(Store, StatementIsResetAfterAFailedStep) {
  TempDir dir;
  Database db(dir.file("plain.sqlite"), Database::Mode::kReadWriteCreate);
  db.exec("CREATE TABLE t (x INTEGER UNIQUE)");
  Statement insert(db, "INSERT INTO t (x) VALUES (?)");
  insert.bind(1, int64_t{1}).run();
  EXPECT_THROW(insert.bind(1, int64_t{1}).run(), StoreError);
  EXPECT_NO_THROW(insert.bind(1, int64_t{2}).run());  // reused after the failure
  Statement count(db, "SELECT count(*) FROM t");
  ASSERT_TRUE(count.step());
  EXPECT_EQ(count.column_int(0), 2);
}

// Root ignores permission bits; tests that need them to count give up that privilege for their
// own process (ctest runs each test in a process of its own).
void respect_file_permissions() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  ASSERT_EQ(syscall(SYS_capget, &header, data), 0);
  for (int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH})
    data[cap / 32].effective &= ~(1u << (cap % 32));
  ASSERT_EQ(syscall(SYS_capset, &header, data), 0);
}

// A write-protected database read by a report: no -wal or -shm file is left beside it (SQLite
// would make them with the database's permissions, and a read-only -shm locks out every later
// writer once the database is writable again).
TEST(Store, ReadingLeavesNoFilesThatLockOutALaterWriter) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  {
    RunStore store(path);
    RunWriter writer(path);
    writer.finish_run(writer.begin_run(std::nullopt, "r", RunConfig{}),
                      sample_summary(RunConfig{}));
  }
  respect_file_permissions();
  ASSERT_EQ(::chmod(path.c_str(), 0444), 0);
  { EXPECT_EQ(RunStore(path, StoreAccess::kReadOnly, false).runs().size(), 1u); }
  EXPECT_FALSE(files::exists(path + "-shm"));
  EXPECT_FALSE(files::exists(path + "-wal"));
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  RunStore store(path);
  RunWriter writer(path);
  EXPECT_NO_THROW(writer.begin_run(std::nullopt, "later", RunConfig{}));
}

// Committed runs still in the -wal, in a folder where no -shm can be made: refused, not read past.
TEST(Store, ReadingRefusesAWriteAheadLogItCannotRead) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  { RunStore store(path); }
  {
    Database writer(path, Database::Mode::kReadWrite);
    writer.exec("PRAGMA wal_autocheckpoint = 0");
    writer.exec(
        "INSERT INTO runs (name, status, config, started, device, host, pid, libtorch) "
        "VALUES ('only in the wal', 'ok', '{}', 'now', 'cpu', 'h', 1, 'x')");
    // Copied while the writer still has it open: the database and its log, not the -shm.
    ASSERT_EQ(::mkdir(dir.file("copy").c_str(), 0755), 0);
    ASSERT_EQ(std::system(("cp " + path + " " + path + "-wal " + dir.file("copy/")).c_str()), 0);
  }
  ASSERT_GT(files::file_size(dir.file("copy/runs.sqlite-wal")), 0);
  respect_file_permissions();
  ASSERT_EQ(::chmod(dir.file("copy").c_str(), 0555), 0);
  try {
    RunStore store(dir.file("copy/runs.sqlite"), StoreAccess::kReadOnly, false);
    ADD_FAILURE() << "read without its write-ahead log: saw " << store.runs().size() << " runs";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("write-ahead log"), std::string::npos) << error.what();
  }
  ::chmod(dir.file("copy").c_str(), 0755);
}

// A reader holding the database for longer than the busy timeout delays the writer's batch;
// it does not lose it.
TEST(Writer, ABatchWaitsOutALockRatherThanBeingDropped) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  RunStore store(path);
  RunWriter writer(path, {std::chrono::milliseconds(50)});
  const int64_t run = writer.begin_run(std::nullopt, "r", RunConfig{});
  std::promise<void> locked;
  std::thread holder([&] {
    Database other(path, Database::Mode::kReadWrite);
    other.exec("BEGIN IMMEDIATE");
    locked.set_value();
    std::this_thread::sleep_for(std::chrono::seconds(7));  // longer than one busy timeout
    other.exec("COMMIT");
  });
  locked.get_future().wait();  // the steps below are written while the other writer holds it
  for (int i = 0; i < 3; ++i) writer.add_step(run, sample_step(i));
  EXPECT_NO_THROW(writer.flush());
  holder.join();
  EXPECT_EQ(store.steps(run).size(), 3u);
}

TEST(Writer, ARunThatMeasuredNothingLeavesItsFiguresEmpty) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  RunStore store(path);
  RunWriter writer(path);
  RunSummary nothing;
  nothing.status = RunStatus::kOom;
  nothing.message = "no batch fits the budget, not even 1";
  const int64_t empty = writer.begin_run(std::nullopt, "found none", RunConfig{});
  writer.finish_run(empty, nothing);
  const int64_t measured = writer.begin_run(std::nullopt, "trained", RunConfig{});
  writer.finish_run(measured, sample_summary(RunConfig{}));
  writer.flush();
  Database db(path, Database::Mode::kReadOnly);
  Statement figures(db,
                    "SELECT id, peak_bytes IS NULL, peak_activation_bytes IS NULL, "
                    "tokens_per_s IS NULL, final_loss IS NULL FROM runs ORDER BY id");
  ASSERT_TRUE(figures.step());
  EXPECT_EQ(figures.column_int(0), empty);
  for (int column = 1; column <= 4; ++column) EXPECT_EQ(figures.column_int(column), 1) << column;
  ASSERT_TRUE(figures.step());
  EXPECT_EQ(figures.column_int(0), measured);
  for (int column = 1; column <= 4; ++column) EXPECT_EQ(figures.column_int(column), 0) << column;
}

// Another host's run cannot be checked from here: it may be deleted, and its writer finishing
// it afterwards is not an error that stops a sweep.
TEST(Store, AnotherHostsRunCanBeDeletedAndItsWriterCarriesOn) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  RunStore store(path);
  RunWriter writer(path);
  const int64_t run = writer.begin_run(std::nullopt, "elsewhere", RunConfig{});
  {
    Database db(path, Database::Mode::kReadWrite);
    db.exec("UPDATE runs SET host = 'another-host' WHERE id = " + std::to_string(run));
  }
  store.delete_runs({run});
  EXPECT_TRUE(store.runs().empty());
  EXPECT_NO_THROW(writer.finish_run(run, sample_summary(RunConfig{})));
  EXPECT_NO_THROW(writer.begin_run(std::nullopt, "next", RunConfig{}));
}

// A newer build's record (here a fine-tuning mode this one does not know) reads with defaults
// where it could not be read, and says so: a LoRA run never passes as a full one unremarked.
TEST(Store, AFieldThisBuildCannotReadIsNamedNotPassedOffAsTheDefault) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  RunConfig config;
  config.model.lora = default_lora_options(config.model.family);
  RunStore store(path);
  RunWriter writer(path);
  const int64_t run = writer.begin_run(std::nullopt, "adapted", config);
  writer.flush();
  {
    Database db(path, Database::Mode::kReadWrite);
    nlohmann::json recorded = to_json(config);
    recorded["finetune"] = "qlora";
    db.exec("UPDATE runs SET config = '" + recorded.dump() + "' WHERE id = " + std::to_string(run));
  }
  const RunRecord read = store.run(run);
  EXPECT_FALSE(read.config.model.lora.enabled());
  // The lora_ fields go with a fine-tuning mode that could not be read, so they are named too.
  EXPECT_EQ(read.unread_config_fields,
            (std::vector<std::string>{"finetune", "lora_alpha", "lora_rank", "lora_targets"}));
  const RunRecord plain = store.run(writer.begin_run(std::nullopt, "plain", RunConfig{}));
  EXPECT_TRUE(plain.unread_config_fields.empty());
  const RunComparison comparison = compare_runs({read, plain});
  const std::string warnings = nlohmann::json(comparison.warnings).dump();
  EXPECT_NE(warnings.find(read.label() +
                          " holds settings not known to this version (a newer RematLab or a hand "
                          "edit): its finetune, lora_alpha, lora_rank, lora_targets could not be "
                          "read"),
            std::string::npos)
      << warnings;
}

// The CSV's config columns hold the defaults of what could not be read; a column beside them
// names those settings in full (a name with a comma quoted as any text), so a reader of the file
// is not handed the defaults as what the run trained with. Blank when everything was read.
TEST(Store, CsvNamesTheRecordedSettingsThisVersionCouldNotRead) {
  RunRecord edited;
  edited.id = 1;
  edited.unread_config_fields = {"finetune", "lora,rank", std::string(100, 'x')};
  RunRecord plain;
  plain.id = 2;
  const auto rows = parse_csv(runs_csv({edited, plain}));
  ASSERT_EQ(rows.size(), 3u);
  ASSERT_EQ(rows[1].size(), rows[0].size());
  ASSERT_EQ(rows[2].size(), rows[0].size());
  const auto column = std::find(rows[0].begin(), rows[0].end(), "unread_config_fields");
  ASSERT_NE(column, rows[0].end());
  const auto at = static_cast<std::size_t>(column - rows[0].begin());
  EXPECT_EQ(rows[1][at], "finetune;lora,rank;" + std::string(100, 'x'));
  EXPECT_EQ(rows[2][at], "");
  // Right after the config columns, before what was asked.
  ASSERT_LT(at + 1, rows[0].size());
  EXPECT_EQ(rows[0][at + 1], "request_max_batch_budget_bytes");
  EXPECT_EQ(runs_csv_header()[at], "unread_config_fields");
}

// A `config` that is valid JSON but no object (or no JSON at all) is not read as `{}`, whose
// defaults would pass for what the run trained with: the record says the whole config was not
// read, and so do `compare` and the CSV. Nothing throws.
TEST(Store, AConfigThatIsNotAnObjectIsReportedUnreadNotReadAsTheDefaults) {
  TempDir dir;
  const std::string path = dir.file("runs.sqlite");
  RunStore store(path);
  RunWriter writer(path);
  const int64_t run = writer.begin_run(std::nullopt, "corrupt", RunConfig{});
  const int64_t plain = writer.begin_run(std::nullopt, "plain", RunConfig{});
  writer.flush();
  for (const std::string text : {"[1,2]", "\"x\"", "42", "null", "true", "not json", ""}) {
    {
      Database db(path, Database::Mode::kReadWrite);
      Statement update(db, "UPDATE runs SET config = ? WHERE id = ?");
      update.bind(1, text).bind(2, run).run();
    }
    RunRecord read;
    ASSERT_NO_THROW(read = store.run(run)) << text;
    EXPECT_EQ(read.unread_config_fields, std::vector<std::string>{kUnreadWholeConfig}) << text;
    std::vector<RunRecord> both;
    ASSERT_NO_THROW(both = store.runs()) << text;
    ASSERT_EQ(both.size(), 2u);
    EXPECT_TRUE(both[1].unread_config_fields.empty()) << text;
    const std::string warnings = nlohmann::json(compare_runs(both).warnings).dump();
    EXPECT_NE(warnings.find(read.label() + " holds settings not known to this version"),
              std::string::npos)
        << text << ": " << warnings;
    EXPECT_NE(warnings.find(std::string(kUnreadWholeConfig) + " could not be read"),
              std::string::npos)
        << text << ": " << warnings;
    const auto rows = parse_csv(runs_csv({read}));
    const auto column = std::find(rows[0].begin(), rows[0].end(), "unread_config_fields");
    ASSERT_NE(column, rows[0].end());
    EXPECT_EQ(rows[1][static_cast<std::size_t>(column - rows[0].begin())], kUnreadWholeConfig);
  }
  // An object is read as before: an empty one is the defaults, with nothing unread.
  {
    Database db(path, Database::Mode::kReadWrite);
    Statement update(db, "UPDATE runs SET config = '{}' WHERE id = ?");
    update.bind(1, run).run();
  }
  EXPECT_TRUE(store.run(run).unread_config_fields.empty());
  EXPECT_TRUE(store.run(plain).unread_config_fields.empty());
}

// The names in a comparison's warning come from the record, which a hand edit can fill with
// anything: the first 8 are named, each cut to 64 characters (never inside a UTF-8 character),
// control characters shown as '?', and the rest counted.
TEST(Comparison, UnreadSettingNamesInAWarningAreBoundedCutAndOnOneLine) {
  RunRecord run = measured_run(1, "none", 400, 1000.0);
  for (int i = 0; i < 20; ++i) run.unread_config_fields.push_back("field" + std::to_string(i));
  run.unread_config_fields[1] = std::string(63, 'a') + "é" + std::string(200, 'b');
  run.unread_config_fields[2] = "two\nlines";
  const RunComparison comparison = compare_runs({run, measured_run(2, "every:1", 100, 800.0)});
  ASSERT_EQ(comparison.warnings.size(), 1u);
  const std::string& warning = comparison.warnings[0];
  EXPECT_NE(warning.find("a newer RematLab or a hand edit"), std::string::npos) << warning;
  EXPECT_NE(warning.find("field0, " + std::string(63, 'a') + "…, two?lines, field3"),
            std::string::npos)
      << warning;
  EXPECT_NE(warning.find("field7 and 12 more could not be read"), std::string::npos) << warning;
  EXPECT_EQ(warning.find("field8"), std::string::npos) << warning;
  EXPECT_EQ(warning.find('\n'), std::string::npos) << warning;
  EXPECT_EQ(warning.find("bbb"), std::string::npos) << warning;
  EXPECT_LT(warning.size(), 400u) << warning;
  EXPECT_EQ(unread_fields_text({"a", "b"}), "a, b");
}

}  // namespace
}  // namespace rematlab
