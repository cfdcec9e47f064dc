// The one writer of the runs database: a thread that owns its own connection, drains a queue of
// writes and commits them in batches (at least once a second, and whenever a caller waits), so
// per-step metrics cost training an enqueue and readers never see "database is locked".
//
// Each write runs in its own savepoint inside the batch's transaction: one that fails is rolled
// back alone, its run is marked `failed` with the reason, and every other write of the batch
// still commits. The writer stays usable after any failure.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "common/process_identity.h"
#include "run/run_request.h"
#include "run/run_summary.h"
#include "store/run_store.h"

namespace rematlab {

class Database;
class Statement;
class Transaction;

struct RunWriterOptions {
  // Bounds how much a crash can lose.
  std::chrono::milliseconds commit_interval{1000};
};

class RunWriter {
 public:
  // `path` must already be a RematLab database (open a RunStore on it first).
  explicit RunWriter(const std::string& path, RunWriterOptions options = {});
  // Commits everything queued, then stops the thread. Errors at this point go to stderr.
  ~RunWriter();
  RunWriter(const RunWriter&) = delete;
  RunWriter& operator=(const RunWriter&) = delete;

  // These wait until committed and throw StoreError when their own write failed.
  int64_t create_experiment(const std::string& name, const nlohmann::json& spec);
  // A new run with status `running`. Its host and pid are those of the process that trains it,
  // `trainer` (default: this one): where the run was measured. This process, which records it
  // and always ends it, is kept beside them when it is another: where it can be checked, its
  // life says whether the run may still be going (deleting it is refused meanwhile), even when
  // the trainer is on a host that cannot be checked from here. For a max-batch
  // search the batch is not known yet: it is recorded as 0 until finish_run stores the batch
  // the run trained at.
  int64_t begin_run(std::optional<int64_t> experiment_id, const std::string& name,
                    const RunConfig& config, const RunRequest& request = {},
                    const std::optional<ProcessIdentity>& trainer = std::nullopt);
  // Status, the config it trained with, what it measured, end time and the memory timeline. A
  // run already marked failed (a write of it failed) keeps that status and reason.
  void finish_run(int64_t run_id, const RunSummary& summary);
  // A run that failed before or outside training (an engine error): status `failed`.
  void fail_run(int64_t run_id, const std::string& message);
  // A run that ended without a summary (a process of it failed or was killed): `failed`, or
  // `cancelled` when the user's stop caused it. Only a run still running, failed or interrupted
  // changes: one recorded ok (or oom, diverged, cancelled) keeps what it measured.
  void end_run(int64_t run_id, RunStatus status, const std::string& message);

  // Queued: committed within one commit interval. A failure marks the run failed.
  void add_step(int64_t run_id, const StepMetrics& step);
  void add_probe(int64_t run_id, int64_t probe, int64_t batch, RunStatus status,
                 int64_t peak_bytes);

  // Waits until everything queued so far is committed. Throws StoreError if a commit failed since
  // the last flush (a database that cannot be written any more); once, not forever after.
  void flush();

 private:
  struct Job {
    int64_t run_id = 0;  // the run the write belongs to; 0: none
    std::function<void(Database&)> write;
    std::shared_ptr<std::promise<void>> done;  // for the callers that wait; may be null
  };
  void enqueue(Job job);
  void write_and_wait(int64_t run_id, std::function<void(Database&)> write);
  void work();
  void commit_batch(std::deque<Job>& batch);
  Transaction begin_patiently();

  const RunWriterOptions options_;
  std::unique_ptr<Database> db_;            // used by the worker thread only
  std::unique_ptr<Statement> insert_step_;  // prepared once, on the worker thread
  std::mutex mutex_;
  std::condition_variable wake_;       // the worker: jobs, a flush request or stop
  std::condition_variable committed_;  // flushers
  std::deque<Job> jobs_;
  std::chrono::steady_clock::time_point oldest_job_;
  uint64_t flush_requested_ = 0;
  uint64_t flush_served_ = 0;
  std::string commit_error_;  // a failed commit since the last flush
  bool stopping_ = false;
  std::thread worker_;  // last: starts once everything above exists
};

}  // namespace rematlab
