// The one writer of the runs database: a thread that owns its own connection, drains a queue of
// writes and commits them in batches (at least once a second, and whenever a caller waits), so
// per-step metrics cost training an enqueue and readers never see "database is locked".
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "store/sqlite_db.h"
#include "train/run_summary.h"

namespace rematlab {

class RunWriter {
 public:
  // `path` must already be a RematLab database (open a RunStore on it first). `commit_interval`
  // bounds how much a crash can lose.
  explicit RunWriter(const std::string& path,
                     std::chrono::milliseconds commit_interval = std::chrono::milliseconds(1000));
  // Commits everything queued, then stops the thread. Errors at this point are reported on stderr.
  ~RunWriter();
  RunWriter(const RunWriter&) = delete;
  RunWriter& operator=(const RunWriter&) = delete;

  // These wait until written; they rethrow the first write error (StoreError).
  int64_t create_experiment(const std::string& name, const nlohmann::json& spec);
  // A new run with status `running`, owned by this process.
  int64_t begin_run(std::optional<int64_t> experiment_id, const std::string& name,
                    const RunConfig& config);
  // Status, summary, end time and the memory timeline (when recorded).
  void finish_run(int64_t run_id, const RunSummary& summary);
  // A run that failed before or outside training (an engine error): status `failed`.
  void fail_run(int64_t run_id, const std::string& message);

  // Queued: committed within one commit interval.
  void add_step(int64_t run_id, const StepMetrics& step);
  void add_probe(int64_t run_id, int64_t probe, int64_t batch, const std::string& status,
                 int64_t peak_bytes);

  // Waits until everything queued so far is committed; rethrows the first write error.
  void flush();

 private:
  using Job = std::function<void(Database&)>;
  void enqueue(Job job);
  void work();

  const std::chrono::milliseconds commit_interval_;
  std::unique_ptr<Database> db_;  // used by the worker thread only
  std::unique_ptr<Statement> insert_step_;  // prepared once, on the worker thread
  std::mutex mutex_;
  std::condition_variable wake_;       // the worker: jobs, a flush request or stop
  std::condition_variable committed_;  // flushers
  std::deque<Job> jobs_;
  std::chrono::steady_clock::time_point oldest_job_;
  uint64_t flush_requested_ = 0;
  uint64_t flush_served_ = 0;
  std::string error_;  // the first write error
  bool stopping_ = false;
  std::thread worker_;  // last: starts once everything above exists
};

}  // namespace rematlab
