// The runs database: schema and migrations, refusals, round trips, the one writer, recovery of
// interrupted runs, CSV. Every test works on a real SQLite file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/errors.h"
#include "common/posix_files.h"
#include "common/process_identity.h"
#include "store/csv_export.h"
#include "store/run_comparison.h"
#include "store/run_store.h"
#include "store/run_writer.h"
#include "store/schema.h"
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

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

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
  Statement tables(db, "SELECT group_concat(name) FROM (SELECT name FROM sqlite_master "
                       "WHERE type = 'table' ORDER BY name)");
  ASSERT_TRUE(tables.step());
  EXPECT_EQ(tables.column_text(0), "experiments,probes,runs,steps,timelines");
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

TEST(Store, MigratesThePreviousVersionKeepingItsRuns) {
  TempDir dir;
  const std::string path = dir.file("old.sqlite");
  create_store_database_at_version(path, kStoreSchemaVersion - 1);
  {
    Database db(path, Database::Mode::kReadWrite);
    db.exec("INSERT INTO experiments (name, created) VALUES ('old', '2026-01-01T00:00:00Z');"
            "INSERT INTO runs (experiment_id, name, status, config, summary, started, device, host,"
            " pid, libtorch) VALUES (1, 'old run', 'ok', '{\"batch\": 4}', '{\"peak_bytes\": 7}',"
            " '2026-01-01T00:00:00Z', 'cpu', 'h', 1, '2.0');"
            "INSERT INTO steps (run_id, step, total_steps, warmup, skipped, loss)"
            " VALUES (1, 0, 1, 0, 0, 2.5);");
  }
  RunStore store(path);
  EXPECT_EQ(pragma_text(path, "user_version"), std::to_string(kStoreSchemaVersion));
  const RunRecord run = store.run(1);
  EXPECT_EQ(run.name, "old run");
  EXPECT_EQ(run.experiment, "old");
  EXPECT_EQ(run.config.at("batch"), 4);
  EXPECT_EQ(run.summary.at("peak_bytes"), 7);
  ASSERT_EQ(store.steps(1).size(), 1u);
  EXPECT_EQ(store.steps(1)[0].loss, 2.5);
  EXPECT_EQ(store.steps(1)[0].reserved_bytes, 0);  // the columns schema 3 added
  EXPECT_EQ(store.steps(1)[0].device_used_bytes, 0);
  EXPECT_TRUE(store.timeline(1).empty());
  EXPECT_EQ(store.integrity_check(), "ok");
}

TEST(Store, RefusesAFileThatIsNotADatabaseAndLeavesItAlone) {
  TempDir dir;
  const std::string path = dir.file("notes.txt");
  std::ofstream(path) << "these are my notes, not a database\n";
  const std::string before = read_bytes(path);
  try {
    RunStore store(path);
    FAIL() << "a text file was accepted";
  } catch (const InvalidInput& error) {
    EXPECT_EQ(error.field(), "--db");
    EXPECT_NE(std::string(error.what()).find("not a RematLab database"), std::string::npos);
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"notes.txt"});  // no -wal, no -journal
}

TEST(Store, RefusesAnotherProgramsSqliteDatabase) {
  TempDir dir;
  const std::string path = dir.file("other.sqlite");
  {
    Database db(path, Database::Mode::kReadWriteCreate);
    db.exec("CREATE TABLE invoices (id INTEGER PRIMARY KEY); INSERT INTO invoices VALUES (1);");
  }
  const std::string before = read_bytes(path);
  EXPECT_THROW(RunStore store(path), InvalidInput);
  EXPECT_EQ(read_bytes(path), before);
}

TEST(Store, RefusesANewerSchemaAndLeavesItAlone) {
  TempDir dir;
  const std::string path = dir.file("future.sqlite");
  { RunStore store(path); }
  {
    Database db(path, Database::Mode::kReadWrite);
    db.exec("PRAGMA journal_mode = DELETE; PRAGMA user_version = 99;");
  }
  const std::string before = read_bytes(path);
  try {
    RunStore store(path);
    FAIL() << "a newer schema was accepted";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("newer"), std::string::npos) << error.what();
  }
  EXPECT_EQ(read_bytes(path), before);
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
    EXPECT_EQ(store.run(run_id).status, "running");
    for (const StepMetrics& step : summary.steps) writer.add_step(run_id, step);
    writer.finish_run(run_id, summary);
  }
  const RunRecord run = store.run(run_id);
  EXPECT_EQ(run.status, "ok");
  EXPECT_EQ(run.name, "every:2 b6");
  EXPECT_EQ(run.experiment, "exp");
  EXPECT_EQ(run.config, to_json(config));
  EXPECT_EQ(run.libtorch, TORCH_VERSION);
  EXPECT_EQ(run.steps_recorded, 3);
  EXPECT_FALSE(run.ended.empty());
  nlohmann::json expected_summary = to_json(summary);
  expected_summary.erase("timeline");
  EXPECT_EQ(run.summary, expected_summary);

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
  RunWriter writer(path, std::chrono::milliseconds(200));
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
  RunWriter writer(path, std::chrono::milliseconds(5));
  const int64_t run_id = writer.begin_run(std::nullopt, "r", RunConfig{});
  std::atomic<bool> done{false};
  std::string reader_error;
  std::size_t last_seen = 0;
  bool monotonic = true;
  std::thread reader([&] {
    try {
      RunStore store(path, /*create=*/false);
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
      Statement run(db, "INSERT INTO runs (name, status, config, started, device, host, pid, "
                        "libtorch) VALUES ('r', 'running', '{}', 'now', 'cpu', ?, ?, 'x')");
      run.bind(1, self.host).bind(2, pid).run();
      return db.last_insert_id();
    };
    const int64_t gone = insert(child);
    Statement step(db, "INSERT INTO steps (run_id, step, total_steps, warmup, skipped) "
                       "VALUES (?, 0, 9, 0, 0)");
    step.bind(1, gone).run();
    insert(self.pid);
  }
  RunStore store(path);
  EXPECT_EQ(store.recovered_runs(), 1);
  EXPECT_EQ(store.run(1).status, "interrupted");
  EXPECT_EQ(store.steps(1).size(), 1u);      // what was committed stays
  EXPECT_EQ(store.run(2).status, "running");  // ours: still alive
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
  writer.flush();
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
  run.status = "ok";
  run.config = {{"batch", 8}, {"checkpoint", "sublayer:1,2"}};
  run.summary = {{"tokens_per_s", 1234.5678901234567}, {"peak_bytes", 123456789}};
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
}

TEST(Store, ComparisonShowsDifferencesAndRatiosToTheFirstRun) {
  RunRecord a, b;
  a.id = 1;
  b.id = 2;
  a.status = b.status = "ok";
  a.config = {{"batch", 8}, {"checkpoint", "none"}};
  b.config = {{"batch", 8}, {"checkpoint", "every:1"}};
  a.summary = {{"peak_bytes", 400}, {"tokens_per_s", 1000.0}, {"checkpoint", "none"}};
  b.summary = {{"peak_bytes", 100}, {"tokens_per_s", 800.0}, {"checkpoint", "every:1"}};
  const auto rows = compare_runs({a, b});
  auto row = [&](const std::string& field) -> const ComparisonRow* {
    for (const auto& r : rows) {
      if (r.field == field) return &r;
    }
    return nullptr;
  };
  ASSERT_NE(row("checkpoint"), nullptr);
  EXPECT_EQ(row("batch"), nullptr);  // equal everywhere: not a difference
  ASSERT_NE(row("peak_bytes"), nullptr);
  EXPECT_DOUBLE_EQ(*row("peak_bytes")->ratio[1], 0.25);
  EXPECT_DOUBLE_EQ(*row("tokens_per_s")->ratio[1], 0.8);
}

TEST(Store, CsvIsWrittenWholeOrNotAtAll) {
  TempDir dir;
  write_file_atomically(dir.file("out.csv"), "a,b\r\n1,2\r\n");
  EXPECT_EQ(read_bytes(dir.file("out.csv")), "a,b\r\n1,2\r\n");
  EXPECT_THROW(write_file_atomically(dir.file("no/such/dir/out.csv"), "x"), InvalidInput);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"out.csv"});  // no temporary left
}

}  // namespace
}  // namespace rematlab
