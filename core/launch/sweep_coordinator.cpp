#include "launch/sweep_coordinator.h"

#include <algorithm>
#include <thread>

#include "common/json_numbers.h"
#include "common/json_text.h"
#include "launch/sweep_protocol.h"
#include "parallel/dist_errors.h"
#include "parallel/rendezvous_store.h"
#include "store/sqlite_db.h"
#include "store/step_fields.h"
#include "sweep/point_wire.h"

namespace rematlab::launch {
namespace {

using Clock = std::chrono::steady_clock;

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
    points_.push_back({std::move(point), PointState::kWaiting, -1, {}, {}, {}});
  }
  if (writer_) experiment_id_ = writer_->create_experiment(spec.name, spec.source);
  const nlohmann::json plan = {
      {"protocol", kSweepProtocol}, {"spec", spec.source.dump()}, {"points", plan_points}};
  store_->set(kPlanKey, parallel::bytes_of(plan.dump()));
  started_ = last_done_ = workers_checked_ = Clock::now();
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
  if (found == workers_.end() || found->second.rank < 0) return "a worker";
  const Worker& worker = found->second;
  return "worker " + std::to_string(worker.rank) + " (pid " + std::to_string(worker.process.pid) +
         " on " + worker.process.host + ")";
}

void SweepCoordinator::pump() {
  if (!stop_seen_ && options_.cancel && options_.cancel->load()) stop_seen_ = Clock::now();
  try {
    while (store_->queueLen(kEventsQueue) > 0) {
      handle(parallel::text_of(store_->queuePop(kEventsQueue, false)));
    }
  } catch (const StoreError&) {
    throw;
  } catch (const c10::Error& error) {
    // The store itself: under torchrun its agent, or this process's own server, is gone.
    throw parallel::PeerFailure("the sweep's rendezvous store failed: " +
                                parallel::torch_error_text(error));
  }
  if (Clock::now() - workers_checked_ >= std::chrono::milliseconds(100)) check_workers();
}

void SweepCoordinator::abandon(const std::string& why) {
  try {
    store_->set(kCoordinatorFailureKey, parallel::bytes_of(why));
  } catch (const std::exception&) {
    // The store is gone too: the workers find that out themselves.
  }
}

bool SweepCoordinator::abandon_heard() {
  try {
    // Only their goodbyes count now: nothing else can be recorded any more.
    while (store_->queueLen(kEventsQueue) > 0) {
      const nlohmann::json event =
          parse_json_or_null(parallel::text_of(store_->queuePop(kEventsQueue, false)));
      if (event.is_object() && event.value("kind", "") == "bye" &&
          event.value("worker", int64_t{-1}) >= 0) {
        workers_[event["worker"].get<int64_t>()].released = true;
      }
    }
    int64_t heard = store_->add(kFailureHeardKey, 0);
    for (const auto& [id, worker] : workers_) heard += worker.released ? 1 : 0;
    return heard >= options_.expected_workers;
  } catch (const std::exception&) {
    return true;  // the store is gone: nobody can read anything more
  }
}

void SweepCoordinator::handle(const std::string& text) {
  nlohmann::json event;
  try {
    event = parse_json(text);
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
    worker->second.heard = Clock::now();  // sent from the training thread: it progresses
    Point& point = points_.at(static_cast<std::size_t>(index));
    if (kind == "activity") {
      point.activity = event.at("text").get<std::string>();
      report(index, nullptr);
    } else if (kind == "probe") {
      const BatchProbe probe = batch_probe_from_json(event.at("probe"));
      point.recorder.add_probe(event.at("index").get<int64_t>(), probe.batch, probe.status,
                               probe.peak_bytes);
    } else if (kind == "step") {
      const StepMetrics step = step_from_json(event.at("step"));
      point.recorder.add_step(step);
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
  worker.rank = event.at("rank").get<int64_t>();
  worker.process.host = event.at("host").get<std::string>();
  worker.process.pid = event.at("pid").get<int64_t>();
  worker.process.start_ticks = event.at("start_ticks").get<int64_t>();
  const int64_t ask = event.at("ask").get<int64_t>();
  if (ended_pid_ && worker.process.pid == *ended_pid_ && !worker.ended) {
    // Asked just before it ended (worker_ended reads what it sent): never to run anything.
    worker.ended = worker.lost = true;
    asked_after_end_ = true;
  }
  if (worker.lost || worker.ended || !work_left()) {
    store_->set(assign_key(id, ask), parallel::bytes_of("-1"));
    return;
  }
  const std::size_t index = next_++;
  Point& point = points_[index];
  point.state = PointState::kRunning;
  point.worker = id;
  point.result.point = point.point;
  point.result.summary.config = point.point.config;
  point.result.summary.status = RunStatus::kRunning;  // until its outcome arrives
  point.recorder = RunRecorder(writer_, experiment_id_, point.point.label, point.point.config,
                               point.point.request, worker.process);
  point.result.run_id = point.recorder.id();
  worker.point = static_cast<int64_t>(index);
  worker.heard = Clock::now();
  store_->set(assign_key(id, ask), parallel::bytes_of(std::to_string(index)));
  if (options_.on_note) {
    options_.on_note("point " + std::to_string(index + 1) + "/" + std::to_string(points_.size()) +
                     " (" + point.point.label + ") -> " + who(id));
  }
}

void SweepCoordinator::on_done(Point& point, Worker& worker, const nlohmann::json& event) {
  SweepRunResult& result = point.result;
  record_outcome(point_outcome_from_json(event.at("outcome")), result, point.recorder);
  // As a sweep in one process stops at a cancelled run, so does this one.
  if (result.summary.status == RunStatus::kCancelled) stopped_ = true;
  worker.point = -1;
  if (worker.ended) worker.lost = true;  // its `done` arrived after its process was reaped
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
  if (alive && !worker.ended && options_.on_lost && worker.process.pid > 0)
    options_.on_lost(static_cast<int>(worker.process.pid));
  if (worker.point < 0) return;
  Point& point = points_.at(static_cast<std::size_t>(worker.point));
  // After Stop, a worker still in a long micro-batch is killed before it can stop: its point
  // was cancelled, not failed. Not so for one already silent for the timeout when Stop came: it
  // hung, and that is what its record says.
  const bool by_stop = stop_seen_ && worker.heard + options_.timeout > *stop_seen_;
  const parallel::ForcedEnd end = parallel::forced_end(by_stop, who(id) + " " + why);
  point.result.summary.status = end.status;
  point.result.summary.message = end.message;
  point.result.summary.run_id = point.result.run_id;
  point.recorder.end(end.status, end.message);
  const int64_t index = worker.point;
  worker.point = -1;
  finish(point, index);
}

bool SweepCoordinator::worker_ended(int pid, const std::string& how) {
  // Only a worker not yet ended can be this process: an ended one's pid may have been reused.
  const auto mark = [&] {
    bool found = false;
    for (auto& [id, worker] : workers_) {
      if (worker.ended || worker.process.pid != pid) continue;
      worker.ended = true;
      worker.ended_at = Clock::now();
      // "worker 1 (pid 42) was killed by signal 9": the launcher's words, after the worker's.
      worker.how_ended = how.substr(std::min(how.size(), how.find(") ") + 2));
      if (worker.point < 0) worker.lost = true;
      found = true;
    }
    return found;
  };
  // Marked first, so that nothing below signals a pid that may already be another process's.
  bool was_worker = mark();
  // What it sent before it ended counts: a point it finished is not failed. Its first `ready`
  // may be read only now: it is answered with nothing, so the point goes to the fresh worker
  // that takes its place (none of our workers can have this pid meanwhile: the launcher starts
  // the fresh one after this returns).
  ended_pid_ = pid;
  asked_after_end_ = false;
  pump();
  ended_pid_.reset();
  return mark() || was_worker || asked_after_end_;
}

void SweepCoordinator::settle_ended_workers() {
  const auto pending = [this] {
    for (const auto& [id, worker] : workers_) {
      if (worker.ended && !worker.lost && worker.point >= 0) return true;
    }
    return false;
  };
  pump();
  while (pending()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pump();
  }
}

void SweepCoordinator::check_workers() {
  workers_checked_ = Clock::now();
  for (auto& [id, worker] : workers_) {
    if (worker.lost || worker.point < 0) continue;
    if (worker.ended) {
      if (workers_checked_ - worker.ended_at >= options_.settle) lose(id, worker.how_ended, false);
    } else if (workers_checked_ - worker.heard > options_.timeout) {
      const auto seconds =
          std::chrono::duration_cast<std::chrono::seconds>(options_.timeout).count();
      lose(id,
           "stopped making progress (no step, probe, activity or setup beat for " +
               std::to_string(seconds) + " s: it hangs)",
           true);
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

}  // namespace rematlab::launch
