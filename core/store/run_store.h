// Reading the runs database (and deleting runs): what the CLI reports and the GUI browse.
// Writing during training goes through RunWriter, the one writer.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memory/memory_tracker.h"
#include "store/sqlite_db.h"
#include "train/step_metrics.h"

namespace rematlab {

struct ExperimentRecord {
  int64_t id = 0;
  std::string name;
  std::string created;  // ISO 8601, UTC
  nlohmann::json spec;  // the sweep spec as given
  int64_t runs = 0;
};

struct RunRecord {
  int64_t id = 0;
  std::optional<int64_t> experiment_id;
  std::string experiment;  // its name, empty for a lone run
  std::string name;
  std::string status;  // running | ok | oom | cancelled | diverged | interrupted | failed
  std::string message;
  nlohmann::json config;   // to_json(RunConfig)
  nlohmann::json summary;  // the `run --json` object (empty until the run ends)
  std::string started, ended;
  std::string device, host, libtorch;
  int64_t steps_recorded = 0;
};

struct ProbeRecord {
  int64_t batch = 0;
  std::string status;
  int64_t peak_bytes = 0;
};

struct RunFilter {
  std::optional<int64_t> experiment_id;
  std::string status;         // empty: any
  std::vector<int64_t> ids;   // empty: any
};

// The SQLite library in use, e.g. "3.40.1" (for About boxes and bug reports).
std::string sqlite_version();

class RunStore {
 public:
  // Opens (creating when `create`) and migrates the database, then marks runs left `running` by
  // processes that no longer exist as `interrupted`. Throws InvalidInput("--db", …).
  explicit RunStore(const std::string& path, bool create = true);

  const std::string& path() const { return path_; }
  int recovered_runs() const { return recovered_runs_; }

  std::vector<ExperimentRecord> experiments();
  std::vector<RunRecord> runs(const RunFilter& filter = {});
  // Throws InvalidInput("ID", …) when there is no such run.
  RunRecord run(int64_t id);
  std::vector<StepMetrics> steps(int64_t run_id);
  std::vector<TimelinePoint> timeline(int64_t run_id);
  std::vector<ProbeRecord> probes(int64_t run_id);
  // Removes the runs with their steps, timelines and probes, in one transaction.
  void delete_runs(const std::vector<int64_t>& ids);
  // PRAGMA integrity_check: "ok" or SQLite's findings.
  std::string integrity_check();

 private:
  int mark_interrupted_runs();

  std::string path_;
  std::unique_ptr<Database> db_;
  int recovered_runs_ = 0;
};

}  // namespace rematlab
