#include "store/run_writer.h"

#include <ctime>
#include <future>
#include <iostream>

#include "common/process_identity.h"
#include "compat/torch_compat.h"
#include "store/schema.h"
#include "store/step_fields.h"

namespace rematlab {
namespace {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

std::string insert_step_sql() {
  std::string columns = "run_id";
  std::string values = "?";
  for (const StepField& field : step_fields()) {
    columns += ", " + std::string(field.name);
    values += ", ?";
  }
  return "INSERT OR REPLACE INTO steps (" + columns + ") VALUES (" + values + ")";
}

// The run's `run --json` object without the per-step list, which lives in the steps table.
nlohmann::json stored_summary(const RunSummary& summary) {
  nlohmann::json json = to_json(summary);
  json.erase("timeline");
  return json;
}

}  // namespace

RunWriter::RunWriter(const std::string& path, std::chrono::milliseconds commit_interval)
    : commit_interval_(commit_interval),
      db_(open_store_database(path, /*create=*/false)),
      worker_([this] { work(); }) {}

RunWriter::~RunWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
  if (!error_.empty()) std::cerr << "rematlab: runs database: " << error_ << std::endl;
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

void RunWriter::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t ticket = ++flush_requested_;
  wake_.notify_all();
  committed_.wait(lock, [&] { return flush_served_ >= ticket; });
  if (!error_.empty()) throw StoreError(error_);
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
        } else if (wake_.wait_until(lock, oldest_job_ + commit_interval_) ==
                   std::cv_status::timeout) {
          break;
        }
      }
      if (stopping_ && jobs_.empty() && flush_requested_ == flush_served_) return;
      batch.swap(jobs_);
      serving = flush_requested_;
    }
    std::string error;
    if (!batch.empty()) {
      try {
        Transaction transaction(*db_);
        for (Job& job : batch) job(*db_);
        transaction.commit();
      } catch (const std::exception& failure) {
        error = failure.what();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error_.empty()) error_ = error;
      flush_served_ = serving;
    }
    committed_.notify_all();
  }
}

int64_t RunWriter::create_experiment(const std::string& name, const nlohmann::json& spec) {
  auto id = std::make_shared<std::promise<int64_t>>();
  auto result = id->get_future();
  enqueue([=](Database& db) {
    Statement insert(db, "INSERT INTO experiments (name, created, spec) VALUES (?, ?, ?)");
    insert.bind(1, name).bind(2, utc_now()).bind(3, spec.dump()).run();
    id->set_value(db.last_insert_id());
  });
  flush();
  return result.get();
}

int64_t RunWriter::begin_run(std::optional<int64_t> experiment_id, const std::string& name,
                             const RunConfig& config) {
  auto id = std::make_shared<std::promise<int64_t>>();
  auto result = id->get_future();
  const ProcessIdentity self = current_process();
  enqueue([=](Database& db) {
    Statement insert(db,
                     "INSERT INTO runs (experiment_id, name, status, config, started, device, "
                     "host, pid, pid_start, libtorch) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, experiment_id)
        .bind(2, name)
        .bind(3, to_json(config).dump())
        .bind(4, utc_now())
        .bind(5, config.device)
        .bind(6, self.host)
        .bind(7, self.pid)
        .bind(8, self.start_ticks)
        .bind(9, compat::torch_version())
        .run();
    id->set_value(db.last_insert_id());
  });
  flush();
  return result.get();
}

void RunWriter::add_step(int64_t run_id, const StepMetrics& step) {
  enqueue([this, run_id, step](Database& db) {
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
  });
}

void RunWriter::add_probe(int64_t run_id, int64_t probe, int64_t batch, const std::string& status,
                          int64_t peak_bytes) {
  enqueue([=](Database& db) {
    Statement insert(db,
                     "INSERT OR REPLACE INTO probes (run_id, probe, batch, status, peak_bytes) "
                     "VALUES (?, ?, ?, ?, ?)");
    insert.bind(1, run_id).bind(2, probe).bind(3, batch).bind(4, status).bind(5, peak_bytes).run();
  });
}

void RunWriter::finish_run(int64_t run_id, const RunSummary& summary) {
  const nlohmann::json json = stored_summary(summary);
  const std::string status = to_string(summary.status);
  const std::vector<TimelinePoint> timeline = summary.timeline;
  const int64_t timeline_step = summary.timeline_step;
  enqueue([=](Database& db) {
    Statement update(db,
                     "UPDATE runs SET status = ?, message = ?, summary = ?, ended = ?, "
                     "tokens_per_s = ?, peak_bytes = ?, peak_activation_bytes = ?, final_loss = ? "
                     "WHERE id = ?");
    update.bind(1, status)
        .bind(2, summary.message)
        .bind(3, json.dump())
        .bind(4, utc_now())
        .bind(5, summary.tokens_per_s)
        .bind(6, summary.peak_bytes)
        .bind(7, summary.peak_activation_bytes)
        .bind(8, summary.final_loss)
        .bind(9, run_id)
        .run();
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
  flush();
}

void RunWriter::fail_run(int64_t run_id, const std::string& message) {
  enqueue([=](Database& db) {
    Statement update(db, "UPDATE runs SET status = 'failed', message = ?, ended = ? WHERE id = ?");
    update.bind(1, message).bind(2, utc_now()).bind(3, run_id).run();
  });
  flush();
}

}  // namespace rematlab
