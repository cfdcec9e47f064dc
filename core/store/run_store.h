// Reading the runs database (and deleting runs, and the measured peak FLOP/s): what the CLI
// reports and the window browses. Writing during training goes through RunWriter, the one
// writer. This header names no SQLite type, so the window cannot reach past it.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memory/timeline_point.h"
#include "run/batch_probe.h"
#include "run/run_config.h"
#include "run/run_request.h"
#include "run/run_status.h"
#include "run/run_summary.h"
#include "run/step_metrics.h"
#include "store/store_access.h"

namespace rematlab {

class Database;

struct ExperimentRecord {
  int64_t id = 0;
  std::string name;
  std::string created;  // ISO 8601, UTC
  nlohmann::json spec;  // the sweep spec as given
  int64_t runs = 0;
};

// One run as the database holds it, typed: what it trained with, what was asked, what it
// measured. Nothing reads a run by JSON key outside the store.
struct RunRecord {
  int64_t id = 0;
  std::optional<int64_t> experiment_id;
  std::string experiment;  // its name, empty for a lone run
  std::string name;
  RunStatus status = RunStatus::kRunning;
  std::string message;  // why, when the status is not ok
  RunConfig config;     // what it trained with (a max-batch run: the batch the search found)
  // Recorded settings this build could not read (not known to this version: a newer RematLab's,
  // or a hand edit), kUnreadWholeConfig (run/run_fields.h) for a config that is no JSON object:
  // `config` holds their defaults, which the run may not have trained with.
  std::vector<std::string> unread_config_fields;
  RunRequest request;  // what was asked (a max-batch search's budget and range)
  RunResult result;    // what it measured; only when has_result
  bool has_result = false;
  std::string started, ended;  // ISO 8601, UTC; ended empty while running
  std::string host, libtorch;
  int64_t steps_recorded = 0;

  // "#12 every:1 b8" for legends and lists.
  std::string label() const;
};

struct RunFilter {
  std::optional<int64_t> experiment_id;
  std::optional<RunStatus> status;
  std::vector<int64_t> ids;  // empty: any
};

// The matmul FLOP/s that MFU and HFU of runs on one device, precision and thread count are taken
// against, measured once in a quiet moment and kept with its date.
struct PeakFlopsRecord {
  std::string host;
  std::string device;  // e.g. "cpu: AMD EPYC 7B13", "cuda: NVIDIA H200"
  Precision precision = Precision::kFp32;
  bool tf32 = false;  // CUDA fp32 matmuls on TF32 tensor cores: a different peak
  int threads = 0;
  double flops = 0.0;
  std::string measured;  // ISO 8601, UTC
  std::string method;    // e.g. "best of 7 1024² matmuls"
};

// The database the CLI and the window share when none is given, so that runs from either show in
// both: $REMATLAB_DB if set, else $XDG_DATA_HOME/rematlab/rematlab.sqlite (by default
// ~/.local/share/rematlab/rematlab.sqlite). Its folder is created when a
// RunStore first creates the database there, not before.
std::string default_database_path();

// What can be checked of `path` as a database to record in without opening it (which creates
// it, or files beside it): the folder, the permissions, and an existing file's own header
// (another program's, a newer schema, cut short). Throws InvalidInput("--db", …) as opening
// would. For a process that must refuse a bad --db before it waits for others (rank 0 of a run).
// Defined with the schema (store/schema.cpp).
void check_database_path(const std::string& path);

// The SQLite library in use, e.g. "3.40.1" (for About boxes and bug reports).
std::string sqlite_version();

class RunStore {
 public:
  // kReadWrite: opens (creating it when `create`) and migrates the database, then marks runs
  // left `running` by processes that no longer exist as `interrupted`. kReadOnly: changes
  // nothing on disk; such runs read as interrupted all the same. Throws InvalidInput("--db", …)
  // (ReadOnlyDatabase for a write-protected file asked for kReadWrite).
  explicit RunStore(const std::string& path, StoreAccess access = StoreAccess::kReadWrite,
                    bool create = true);
  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  const std::string& path() const { return path_; }
  bool read_only() const { return access_ == StoreAccess::kReadOnly; }
  int recovered_runs() const { return recovered_runs_; }

  std::vector<ExperimentRecord> experiments();
  std::vector<RunRecord> runs(const RunFilter& filter = {});
  // Throws InvalidInput("ID", …) when there is no such run.
  RunRecord run(int64_t id);
  std::vector<StepMetrics> steps(int64_t run_id);
  std::vector<TimelinePoint> timeline(int64_t run_id);
  std::vector<BatchProbe> probes(int64_t run_id);  // without their messages
  // Removes the runs with their steps, timelines and probes, in one transaction. Refuses (throws
  // InvalidInput naming the run) a run that a live process of this host is still training (one
  // of another host cannot be checked: the user decides), and any deletion in a read-only store.
  void delete_runs(const std::vector<int64_t>& ids);
  // PRAGMA integrity_check: "ok" or SQLite's findings.
  std::string integrity_check();

  // The kept peak for `key`'s host, device, precision, TF32 switch and threads.
  std::optional<PeakFlopsRecord> peak_flops(const PeakFlopsRecord& key);
  void save_peak_flops(const PeakFlopsRecord& peak);
  // A chain profile kept under `key` (plan/profile_key.h): its costs as JSON, how long measuring
  // them took and when (UTC).
  struct KeptProfile {
    std::string costs;
    double profile_ms = 0.0;
    std::string measured;
  };
  std::optional<KeptProfile> chain_profile(const std::string& key);
  // Every kept profile with its key, the most recently measured first.
  std::vector<std::pair<std::string, KeptProfile>> chain_profiles();
  void save_chain_profile(const std::string& key, const KeptProfile& profile);

 private:
  int mark_interrupted_runs();
  void require_writable(const std::string& what) const;

  std::string path_;
  StoreAccess access_;
  std::unique_ptr<Database> db_;
  int recovered_runs_ = 0;
};

}  // namespace rematlab
