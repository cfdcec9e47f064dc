#include "store/run_writer.h"

#include <iostream>
#include <set>

#include "common/json_numbers.h"
#include "common/process_identity.h"
#include "common/utc_time.h"
#include "compat/torch_compat.h"
#include "store/schema.h"
#include "store/sqlite_db.h"
#include "store/step_fields.h"

namespace rematlab {
namespace {

std::string insert_step_sql() {
  std::string columns = "run_id";
  std::string values = "?";
  for (const StepField& field : step_fields()) {
    columns += ", " + std::string(field.name);
    values += ", ?";
  }
  return "INSERT OR REPLACE INTO steps (" + columns + ") VALUES (" + values + ")";
}

// Marks a run whose write failed, inside the batch's transaction. Best effort: when even this
// fails (the run's row is gone), there is nothing left to mark.
void mark_failed(Database& db, int64_t run_id, const std::string& reason) {
  try {
    Statement update(db, "UPDATE runs SET status = 'failed', message = ?, ended = ? WHERE id = ?");
    update.bind(1, "recording the run failed: " + reason).bind(2, utc_now()).bind(3, run_id).run();
  } catch (const StoreError&) {
  }
}

}  // namespace

RunWriter::RunWriter(const std::string& path, RunWriterOptions options)
    : options_(options),
      db_(open_store_database(path, StoreAccess::kReadWrite, /*create=*/false)),
      worker_([this] { work(); }) {}

RunWriter::~RunWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
  if (!commit_error_.empty())
    std::cerr << "rematlab: runs database: " << commit_error_ << std::endl;
}

void RunWriter::enqueue(Job job) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    first = jobs_.empty();
    if (first) oldest_job_ = std::chrono::steady_clock::now();
    jobs_.push_back(std::move(job));
  }
  // Only the first job of a batch sets the worker's deadline; waking it for every step would
  // cost the trainer a context switch per step for nothing.
  if (first) wake_.notify_all();
}

void RunWriter::write_and_wait(int64_t run_id, std::function<void(Database&)> write) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> committed = done->get_future();
  enqueue({run_id, std::move(write), done});
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++flush_requested_;  // commit now rather than at the interval
  }
  wake_.notify_all();
  committed.get();  // rethrows this write's own failure
}

void RunWriter::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t ticket = ++flush_requested_;
  wake_.notify_all();
  committed_.wait(lock, [&] { return flush_served_ >= ticket; });
  if (!commit_error_.empty()) {
    const std::string error = std::move(commit_error_);
    commit_error_.clear();
    throw StoreError(error);
  }
}

void RunWriter::work() {
  for (;;) {
    std::deque<Job> batch;
    uint64_t serving = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      for (;;) {
        if (stopping_ || flush_requested_ > flush_served_) break;
        if (jobs_.empty()) {
          wake_.wait(lock);
        } else if (wake_.wait_until(lock, oldest_job_ + options_.commit_interval) ==
                   std::cv_status::timeout) {
          break;
        }
      }
      if (stopping_ && jobs_.empty() && flush_requested_ == flush_served_) return;
      batch.swap(jobs_);
      serving = flush_requested_;
    }
    commit_batch(batch);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      flush_served_ = serving;
    }
    committed_.notify_all();
  }
}

void RunWriter::commit_batch(std::deque<Job>& batch) {
  if (batch.empty()) return;
  std::vector<std::exception_ptr> failures(batch.size());
  // SQLite rolls a transaction back by itself after some errors (a full disk, I/O); the jobs
  // that follow would then commit one by one outside it while reported failed.
  auto still_in_transaction = [&] {
    if (!db_->in_transaction()) {
      throw StoreError("database '" + db_->path() + "': the batch was rolled back by SQLite");
    }
  };
  try {
    Transaction transaction = begin_patiently();
    for (std::size_t i = 0; i < batch.size(); ++i) {
      db_->exec("SAVEPOINT job");
      try {
        batch[i].write(*db_);
        db_->exec("RELEASE job");
      } catch (const std::exception& error) {
        failures[i] = std::current_exception();
        still_in_transaction();
        db_->exec("ROLLBACK TO job");
        db_->exec("RELEASE job");
        if (batch[i].run_id != 0) mark_failed(*db_, batch[i].run_id, error.what());
      }
      still_in_transaction();
    }
    transaction.commit();
  } catch (const std::exception& error) {
    // The transaction itself failed: nothing of it landed.
    const std::exception_ptr failure = std::current_exception();
    for (auto& job_failure : failures) job_failure = failure;
    std::lock_guard<std::mutex> lock(mutex_);
    if (commit_error_.empty()) commit_error_ = error.what();
  }
  std::set<int64_t> reported;  // queued writes have no caller to tell: once per run, on stderr
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (failures[i] && !batch[i].done && reported.insert(batch[i].run_id).second) {
      try {
        std::rethrow_exception(failures[i]);
      } catch (const std::exception& error) {
        std::cerr << "rematlab: runs database: run " << batch[i].run_id << ": " << error.what()
                  << std::endl;
      }
    }
    if (!batch[i].done) continue;
    if (failures[i]) {
      batch[i].done->set_exception(failures[i]);
    } else {
      batch[i].done->set_value();
    }
  }
}

Transaction RunWriter::begin_patiently() {
  // Another program holding the database makes BEGIN wait the busy timeout (5 s) and fail; the
  // batch is kept and BEGIN tried again, so another writer's long transaction (readers never
  // block us in WAL mode) loses no steps.
  constexpr int kAttempts = 6;
  for (int attempt = 1;; ++attempt) {
    try {
      return Transaction(*db_);
    } catch (const StoreError& error) {
      if (!error.locked() || attempt == kAttempts) throw;
    }
  }
}

int64_t RunWriter::create_experiment(const std::string& name, const nlohmann::json& spec) {
  auto id = std::make_shared<int64_t>(0);
  write_and_wait(0, [=](Database& db) {
    Statement insert(db, "INSERT INTO experiments (name, created, spec) VALUES (?, ?, ?)");
    insert.bind(1, name).bind(2, utc_now()).bind(3, dump_json(spec)).run();
    *id = db.last_insert_id();
  });
  return *id;
}

int64_t RunWriter::begin_run(std::optional<int64_t> experiment_id, const std::string& name,
                             const RunConfig& config, const RunRequest& request,
                             const std::optional<ProcessIdentity>& trainer) {
  auto id = std::make_shared<int64_t>(0);
  const ProcessIdentity self = trainer ? *trainer : current_process();
  // Recorded only when another process trains it (rows of older schemas have it empty too).
  const ProcessIdentity recorder = trainer ? current_process() : ProcessIdentity{};
  RunConfig recorded = config;
  if (request.max_batch) recorded.batch = 0;  // not known until the search ends
  write_and_wait(0, [=](Database& db) {
    Statement insert(db,
                     "INSERT INTO runs (experiment_id, name, status, config, request, started, "
                     "device, host, pid, pid_start, libtorch, recorder_host, recorder_pid, "
                     "recorder_start) "
                     "VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, experiment_id)
        .bind(2, name)
        .bind(3, dump_json(to_json(recorded)))
        .bind(4, dump_json(to_json(request)))
        .bind(5, utc_now())
        .bind(6, config.device)
        .bind(7, self.host)
        .bind(8, self.pid)
        .bind(9, self.start_ticks)
        .bind(10, compat::torch_version())
        .bind(11, recorder.host)
        .bind(12, recorder.pid)
        .bind(13, recorder.start_ticks)
        .run();
    *id = db.last_insert_id();
  });
  return *id;
}

void RunWriter::add_step(int64_t run_id, const StepMetrics& step) {
  enqueue({run_id,
           [this, run_id, step](Database& db) {
             if (!insert_step_) insert_step_ = std::make_unique<Statement>(db, insert_step_sql());
             Statement& insert = *insert_step_;
             insert.bind(1, run_id);
             int index = 2;
             for (const StepField& field : step_fields()) {
               std::visit(
                   [&](auto member) {
                     using Value = std::decay_t<decltype(step.*member)>;
                     if constexpr (std::is_same_v<Value, double>) {
                       insert.bind(index, step.*member);
                     } else {
                       insert.bind(index, static_cast<int64_t>(step.*member));
                     }
                   },
                   field.member);
               ++index;
             }
             insert.run();
           },
           nullptr});
}

void RunWriter::add_probe(int64_t run_id, int64_t probe, int64_t batch, RunStatus status,
                          int64_t peak_bytes) {
  enqueue({run_id,
           [=](Database& db) {
             Statement insert(db,
                              "INSERT OR REPLACE INTO probes (run_id, probe, batch, status, "
                              "peak_bytes) VALUES (?, ?, ?, ?, ?)");
             insert.bind(1, run_id)
                 .bind(2, probe)
                 .bind(3, batch)
                 .bind(4, to_string(status))
                 .bind(5, peak_bytes)
                 .run();
           },
           nullptr});
}

void RunWriter::finish_run(int64_t run_id, const RunSummary& summary) {
  const std::string config = dump_json(to_json(summary.config));
  const std::string planned = summary.planned ? dump_json(to_json(*summary.planned)) : "";
  const std::string result = dump_json(to_json(static_cast<const RunResult&>(summary)));
  const std::string status = to_string(summary.status);
  const std::vector<TimelinePoint> timeline = summary.timeline;
  const int64_t timeline_step = summary.timeline_step;
  write_and_wait(run_id, [=](Database& db) {
    // A run already marked failed (one of its writes failed) keeps that status and reason.
    Statement update(db,
                     "UPDATE runs SET "
                     "status = CASE status WHEN 'failed' THEN status ELSE ? END, "
                     "message = CASE status WHEN 'failed' THEN message ELSE ? END, "
                     "config = ?, summary = ?, ended = ?, tokens_per_s = ?, peak_bytes = ?, "
                     "peak_activation_bytes = ?, final_loss = ? WHERE id = ?");
    update.bind(1, status).bind(2, summary.message).bind(3, config).bind(4, result);
    update.bind(5, utc_now()).bind(10, run_id);
    if (summary.steps_completed > 0) {
      update.bind(6, summary.tokens_per_s)
          .bind(7, summary.peak_bytes)
          .bind(8, summary.peak_activation_bytes)
          .bind(9, summary.final_loss);
    } else {
      // Nothing was measured (a search that found no batch, a run stopped before its first
      // step): no figures, rather than zeros a query would take for measurements.
      for (int column = 6; column <= 9; ++column) update.bind_null(column);
    }
    update.run();
    if (db.changes() == 0) return;  // the run was deleted meanwhile: nothing to finish
    if (!planned.empty()) {
      // What was asked (the budget) and what the planner promised, beside what was measured.
      Statement request(db,
                        "UPDATE runs SET request = json_set(CASE WHEN json_valid(request) THEN "
                        "request ELSE '{}' END, '$.plan', json(?)) WHERE id = ?");
      request.bind(1, planned).bind(2, run_id).run();
    }
    Statement point(db,
                    "INSERT OR REPLACE INTO timelines (run_id, step, point, time_ms, bytes, phase) "
                    "VALUES (?, ?, ?, ?, ?, ?)");
    for (std::size_t i = 0; i < timeline.size(); ++i) {
      point.bind(1, run_id)
          .bind(2, timeline_step)
          .bind(3, static_cast<int64_t>(i))
          .bind(4, timeline[i].time_ms)
          .bind(5, timeline[i].bytes)
          .bind(6, to_string(timeline[i].phase))
          .run();
    }
  });
}

void RunWriter::fail_run(int64_t run_id, const std::string& message) {
  end_run(run_id, RunStatus::kFailed, message);
}

void RunWriter::end_run(int64_t run_id, RunStatus status, const std::string& message) {
  write_and_wait(run_id, [=](Database& db) {
    // A run that ended well (rank 0 recorded it after every rank finished) keeps its status
    // whatever happens to a process afterwards.
    Statement update(db,
                     "UPDATE runs SET status = ?, message = ?, ended = ? WHERE id = ? "
                     "AND status IN ('running', 'failed', 'interrupted')");
    update.bind(1, to_string(status)).bind(2, message).bind(3, utc_now()).bind(4, run_id).run();
  });
}

}  // namespace rematlab
