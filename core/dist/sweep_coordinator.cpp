#include "dist/sweep_coordinator.h"

#include <algorithm>

#include "common/json_numbers.h"
#include "dist/dist_errors.h"
#include "dist/rendezvous_store.h"
#include "dist/sweep_protocol.h"
#include "store/sqlite_db.h"
#include "store/step_fields.h"
#include "sweep/point_wire.h"

namespace rematlab::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::string text_of(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }
std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

}  // namespace

SweepCoordinator::SweepCoordinator(c10::intrusive_ptr<c10d::Store> store, const SweepSpec& spec,
                                   std::vector<SweepPoint> points, RunWriter* writer,
                                   SweepCoordinatorOptions options)
    : store_(std::move(store)), writer_(writer), options_(std::move(options)) {
  nlohmann::json plan_points = nlohmann::json::array();
  for (SweepPoint& point : points) {
    plan_points.push_back({{"threads", point.config.threads},
                           {"peak_flops", json_number(point.config.peak_flops)},
                           {"peak_flops_source", point.config.peak_flops_source}});
    points_.push_back({std::move(point), PointState::kWaiting, -1, {}, {}});
  }
  if (writer_) experiment_id_ = writer_->create_experiment(spec.name, spec.source);
  const nlohmann::json plan = {
      {"protocol", kSweepProtocol}, {"spec", spec.source.dump()}, {"points", plan_points}};
  store_->set(kPlanKey, bytes_of(plan.dump()));
  started_ = last_done_ = heartbeats_checked_ = Clock::now();
}

bool SweepCoordinator::work_left() const {
  const bool cancelled = stopped_ || (options_.cancel && options_.cancel->load());
  return !cancelled && next_ < points_.size();
}

bool SweepCoordinator::finished() const {
  for (const Point& point : points_) {
    if (point.state == PointState::kRunning) return false;
  }
  if (work_left()) return false;
  if (options_.expected_workers <= 0) return true;
  std::size_t let_go = 0;
  for (const auto& [id, worker] : workers_) let_go += worker.released || worker.lost ? 1 : 0;
  // A worker that never asked (it never started, or died idle) is waited for only so long.
  return let_go >= static_cast<std::size_t>(options_.expected_workers) ||
         Clock::now() - last_done_ > options_.timeout;
}

std::vector<SweepRunResult> SweepCoordinator::results() const {
  std::vector<SweepRunResult> results;
  for (const Point& point : points_) {
    if (point.state != PointState::kWaiting) results.push_back(point.result);
  }
  return results;
}

std::string SweepCoordinator::who(int64_t id) const {
  const auto found = workers_.find(id);
  if (found == workers_.end()) return "worker " + std::to_string(id);
  return "worker " + std::to_string(id) + " (pid " + std::to_string(found->second.pid) + " on " +
         found->second.host + ")";
}

void SweepCoordinator::pump() {
  try {
    while (store_->queueLen(kEventsQueue) > 0) {
      handle(text_of(store_->queuePop(kEventsQueue, false)));
    }
  } catch (const StoreError&) {
    throw;
  } catch (const c10::Error& error) {
    // The store itself: under torchrun its agent, or this process's own server, is gone.
    throw PeerFailure("the sweep's rendezvous store failed: " + torch_error_text(error));
  }
  if (Clock::now() - heartbeats_checked_ >= kHeartbeatInterval) check_heartbeats();
}

void SweepCoordinator::handle(const std::string& text) {
  nlohmann::json event;
  try {
    event = nlohmann::json::parse(text);
    const int64_t id = event.at("worker").get<int64_t>();
    const std::string kind = event.at("kind").get<std::string>();
    if (kind == "ready") return on_ready(id, event);
    if (kind == "bye") {
      workers_[id].released = true;  // it read its last answer: the store may go
      return;
    }
    auto worker = workers_.find(id);
    if (worker == workers_.end() || worker->second.lost) return;  // its point is failed already
    const int64_t index = event.at("point").get<int64_t>();
    if (index != worker->second.point) return;
    Point& point = points_.at(static_cast<std::size_t>(index));
    const int64_t run_id = point.result.run_id.value_or(0);
    if (kind == "activity") {
      point.activity = event.at("text").get<std::string>();
      report(index, nullptr);
    } else if (kind == "probe") {
      const BatchProbe probe = batch_probe_from_json(event.at("probe"));
      if (writer_) {
        writer_->add_probe(run_id, event.at("index").get<int64_t>(), probe.batch, probe.status,
                           probe.peak_bytes);
      }
    } else if (kind == "step") {
      const StepMetrics step = step_from_json(event.at("step"));
      if (writer_) writer_->add_step(run_id, step);
      report(index, &step);
    } else if (kind == "done") {
      on_done(point, worker->second, event);
    }
  } catch (const StoreError&) {
    throw;
  } catch (const std::exception& error) {
    // A worker of another build, or a message cut short: say so, and fail the point it concerns
    // rather than the sweep.
    if (options_.on_note)
      options_.on_note("a worker sent what this build cannot read: " + std::string(error.what()));
    if (event.is_object() && event.contains("worker") && event["worker"].is_number_integer()) {
      lose(event["worker"].get<int64_t>(),
           "sent a message this build cannot read (" + std::string(error.what()) + ")", true);
    }
  }
}

void SweepCoordinator::on_ready(int64_t id, const nlohmann::json& event) {
  Worker& worker = workers_[id];
  worker.host = event.at("host").get<std::string>();
  worker.pid = event.at("pid").get<int>();
  const int64_t ask = event.at("ask").get<int64_t>();
  if (worker.lost || !work_left()) {
    store_->set(assign_key(id, ask), bytes_of("-1"));
    return;
  }
  const std::size_t index = next_++;
  Point& point = points_[index];
  point.state = PointState::kRunning;
  point.worker = id;
  point.result.point = point.point;
  point.result.summary.config = point.point.config;
  if (writer_) {
    point.result.run_id = writer_->begin_run(experiment_id_, point.point.label, point.point.config,
                                             point.point.request);
  }
  worker.point = static_cast<int64_t>(index);
  worker.heard = Clock::now();
  store_->set(assign_key(id, ask), bytes_of(std::to_string(index)));
  if (options_.on_note) {
    options_.on_note("point " + std::to_string(index + 1) + "/" + std::to_string(points_.size()) +
                     " (" + point.point.label + ") -> " + who(id));
  }
}

void SweepCoordinator::on_done(Point& point, Worker& worker, const nlohmann::json& event) {
  SweepRunResult& result = point.result;
  record_outcome(point_outcome_from_json(event.at("outcome")), result, writer_);
  // As a sweep in one process stops at a cancelled run, so does this one.
  if (result.summary.status == RunStatus::kCancelled) stopped_ = true;
  worker.point = -1;
  finish(point, static_cast<int64_t>(&point - points_.data()));
}

void SweepCoordinator::finish(Point& point, int64_t index) {
  point.state = PointState::kDone;
  ++done_;
  last_done_ = Clock::now();
  if (options_.on_note) {
    const RunSummary& summary = point.result.summary;
    options_.on_note("point " + std::to_string(index + 1) + "/" + std::to_string(points_.size()) +
                     " (" + point.point.label + ") " + to_string(summary.status) +
                     (summary.message.empty() ? "" : ": " + summary.message) + "; " +
                     std::to_string(done_) + " of " + std::to_string(points_.size()) + " done");
  }
}

void SweepCoordinator::lose(int64_t id, const std::string& why, bool alive) {
  Worker& worker = workers_[id];
  if (worker.lost) return;
  worker.lost = true;
  if (alive && options_.on_lost && worker.pid > 0) options_.on_lost(worker.pid);
  if (worker.point < 0) return;
  Point& point = points_.at(static_cast<std::size_t>(worker.point));
  const std::string message = who(id) + " " + why;
  point.result.summary.status = RunStatus::kFailed;
  point.result.summary.message = message;
  point.result.summary.run_id = point.result.run_id;
  if (writer_) writer_->fail_run(*point.result.run_id, message);
  const int64_t index = worker.point;
  worker.point = -1;
  finish(point, index);
}

bool SweepCoordinator::worker_ended(int pid, const std::string& how) {
  // What it sent before it ended counts: a point it finished is not failed.
  pump();
  for (auto& [id, worker] : workers_) {
    if (worker.pid != pid) continue;
    if (!worker.lost && worker.point >= 0) {
      // "rank 1 (pid 42) was killed by signal 9": the launcher's words, after the worker's.
      lose(id, how.substr(std::min(how.size(), how.find(") ") + 2)), false);
    }
    worker.lost = true;
    return true;
  }
  return false;
}

void SweepCoordinator::check_heartbeats() {
  heartbeats_checked_ = Clock::now();
  for (auto& [id, worker] : workers_) {
    if (worker.lost || worker.point < 0) continue;
    int64_t beat = -1;
    try {
      beat = store_->add(heartbeat_key(id), 0);
    } catch (const c10::Error& error) {
      throw PeerFailure("the sweep's rendezvous store failed: " + torch_error_text(error));
    }
    if (beat != worker.heartbeat) {
      worker.heartbeat = beat;
      worker.heard = heartbeats_checked_;
    } else if (heartbeats_checked_ - worker.heard > options_.timeout) {
      const auto seconds =
          std::chrono::duration_cast<std::chrono::seconds>(options_.timeout).count();
      lose(id, "stopped responding (no heartbeat for " + std::to_string(seconds) + " s)", true);
    }
  }
}

void SweepCoordinator::report(int64_t index, const StepMetrics* step) {
  if (!options_.on_progress) return;
  const Point& point = points_.at(static_cast<std::size_t>(index));
  SweepProgress progress;
  progress.run_index = index;
  progress.run_count = static_cast<int64_t>(points_.size());
  progress.label = point.point.label;
  progress.activity = point.activity;
  progress.step = step;
  if (done_ > 0) {
    // Points end at the rate the workers together finish them.
    const double elapsed = std::chrono::duration<double>(Clock::now() - started_).count();
    progress.eta_s =
        elapsed / static_cast<double>(done_) * static_cast<double>(points_.size() - done_);
  }
  options_.on_progress(progress);
}

}  // namespace rematlab::dist
