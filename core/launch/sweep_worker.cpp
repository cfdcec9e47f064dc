#include "launch/sweep_worker.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "common/errors.h"
#include "common/json_numbers.h"
#include "common/json_text.h"
#include "common/process_identity.h"
#include "launch/sweep_protocol.h"
#include "parallel/dist_errors.h"
#include "parallel/rendezvous_store.h"
#include "store/sqlite_db.h"
#include "store/step_fields.h"
#include "sweep/point_runner.h"
#include "sweep/point_wire.h"

namespace rematlab::launch {
namespace {

// Calls `beat` every `every`, at most `count` times, on a thread of its own until destroyed. For
// the stretch where the training thread builds a model or profiles it for a plan: work that
// sends nothing for a while and waits on no other process. Capped all the same, so that a build
// stuck for good (a wedged GPU, a data file on a dead mount) is found hung in the end. A beat
// that throws (the coordinator is gone) ends the beating; the training thread meets the same
// error at its next message.
class SetupBeat {
 public:
  SetupBeat(std::function<void()> beat, std::chrono::milliseconds every, int count)
      : beat_(std::move(beat)), every_(every), left_(count), thread_([this] { loop(); }) {}
  ~SetupBeat() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  SetupBeat(const SetupBeat&) = delete;
  SetupBeat& operator=(const SetupBeat&) = delete;

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (left_-- > 0 && !wake_.wait_for(lock, every_, [this] { return stop_; })) {
      lock.unlock();  // a slow send must not hold up the end of the build
      try {
        beat_();
      } catch (const std::exception&) {
        return;
      }
      lock.lock();
    }
  }

  std::function<void()> beat_;
  std::chrono::milliseconds every_;
  int left_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once everything above exists
};

class Worker {
 public:
  Worker(c10::intrusive_ptr<c10d::Store> store, const SweepWorkerOptions& options)
      : store_(std::move(store)), options_(options) {}

  template <typename Call>
  auto talk(const char* what, Call&& call) {
    try {
      return call();
    } catch (const c10::Error& error) {
      // Reported as "recording lost": a point must not be failed for it, nor the next one run.
      throw StoreError(std::string("sweep worker: ") + what +
                       ": the coordinator cannot be reached: " + parallel::torch_error_text(error));
    }
  }

  // A coordinator that gave up said why: that, not silence, is what the worker reports.
  void check_coordinator(const char* what) {
    const bool failed = talk(what, [&] { return store_->check({kCoordinatorFailureKey}); });
    if (!failed) return;
    const std::string why = talk(what, [&] { return store_->get_to_str(kCoordinatorFailureKey); });
    // Counted once, whichever thread read it first: the coordinator may let the store go once
    // every worker has.
    if (!told_heard_.exchange(true)) talk(what, [&] { return store_->add(kFailureHeardKey, 1); });
    throw StoreError(std::string("sweep worker: ") + what + ": the coordinator failed: " + why);
  }

  void send(nlohmann::json event) {
    event["worker"] = id_;
    const std::string text = event.dump();
    check_coordinator("sending to the coordinator");
    talk("sending to the coordinator",
         [&] { store_->queuePush(kEventsQueue, parallel::bytes_of(text)); });
  }

  // Waits for `key` as the coordinator's answer, watching for its failure meanwhile.
  std::string get(const std::string& key) {
    const char* what = "waiting for the coordinator";
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    while (!talk(what, [&] { return store_->check({key}); })) {
      check_coordinator(what);
      if (std::chrono::steady_clock::now() > deadline) {
        throw StoreError(std::string("sweep worker: ") + what +
                         ": the coordinator cannot be reached: no answer within " +
                         std::to_string((options_.timeout.count() + 999) / 1000) + " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return talk(what, [&] { return store_->get_to_str(key); });
  }

  int64_t run(const SweepSpec& spec) {
    id_ = talk("joining the sweep", [&] { return store_->add(kWorkerIdsKey, 1) - 1; });
    std::vector<SweepPoint> points = expand_sweep(spec);
    apply_plan(spec, points);
    const ProcessIdentity self = current_process();
    int64_t ran = 0;
    for (int64_t ask = 0;; ++ask) {
      if (options_.cancel && options_.cancel->load()) break;
      send({{"kind", "ready"},
            {"ask", ask},
            {"rank", options_.rank},
            {"host", self.host},
            {"pid", self.pid},
            {"start_ticks", self.start_ticks}});
      const int64_t index = std::stoll(get(assign_key(id_, ask)));
      if (index < 0) break;
      run_point(points.at(static_cast<std::size_t>(index)), index);
      ++ran;
    }
    // Under Slurm rank 0 serves the store: it waits for this before it may end.
    send({{"kind", "bye"}});
    return ran;
  }

 private:
  // The coordinator's plan: the same spec (else this worker would run other points under their
  // names) and what it resolved for each point.
  void apply_plan(const SweepSpec& spec, std::vector<SweepPoint>& points) {
    nlohmann::json plan;
    try {
      plan = parse_json(get(kPlanKey));
    } catch (const StoreError& error) {
      throw parallel::PeerFailure(std::string("no sweep plan from the coordinator: ") +
                                  error.what());
    }
    if (plan.at("protocol").get<int>() != kSweepProtocol) {
      throw InvalidInput("sweep", "this worker's rematlab-cli speaks sweep protocol " +
                                      std::to_string(kSweepProtocol) + ", the coordinator " +
                                      brief_json(plan.at("protocol")) + "; use the same build");
    }
    if (plan.at("spec").get<std::string>() != spec.source.dump()) {
      throw InvalidInput("--spec",
                         "this worker was given another sweep spec than the coordinator (rank 0); "
                         "start every worker with the same spec");
    }
    const nlohmann::json& resolved = plan.at("points");
    if (resolved.size() != points.size()) {
      throw InvalidInput("--spec", "the spec expands to " + std::to_string(points.size()) +
                                       " points here but " + std::to_string(resolved.size()) +
                                       " for the coordinator; use the same build");
    }
    for (std::size_t i = 0; i < points.size(); ++i) {
      RunConfig& config = points[i].config;
      config.threads = resolved[i].at("threads").get<int>();
      config.peak_flops = number_from_json(resolved[i].at("peak_flops"));
      config.peak_flops_source = resolved[i].at("peak_flops_source").get<std::string>();
      if (config.device == "cuda") config.device = "cuda:" + std::to_string(options_.local_rank);
    }
  }

  void run_point(const SweepPoint& point, int64_t index) {
    PointHooks hooks;
    hooks.cancel = options_.cancel;
    std::string last_activity;
    hooks.on_activity = [&](const std::string& activity, const StepMetrics*) {
      if (activity == last_activity) return;  // steps carry the progress
      last_activity = activity;
      send({{"kind", "activity"}, {"point", index}, {"text", activity}});
    };
    hooks.on_probe = [&](int64_t probe_index, const BatchProbe& probe) {
      send({{"kind", "probe"},
            {"point", index},
            {"index", probe_index},
            {"probe", probe_on_the_wire(probe)}});
    };
    hooks.on_step = [&](const StepMetrics& step) {
      send({{"kind", "step"}, {"point", index}, {"step", step_to_json(step)}});
    };
    // Beats four times per timeout, so that a slow build is not taken for a hang, for at most
    // kSetupTimeouts timeouts. The training thread sends nothing meanwhile: the store is never
    // used by both at once.
    std::optional<SetupBeat> beat;
    hooks.on_setup = [&](bool building) {
      if (!building) return beat.reset();
      beat.emplace(
          [this, index] {
            send({{"kind", "setup"}, {"point", index}});
          },
          std::max(std::chrono::milliseconds(50), options_.timeout / 4), 4 * kSetupTimeouts);
    };
    const PointOutcome outcome = run_sweep_point(point, point.config, hooks);
    send({{"kind", "done"}, {"point", index}, {"outcome", to_json(outcome)}});
  }

  c10::intrusive_ptr<c10d::Store> store_;
  SweepWorkerOptions options_;
  int64_t id_ = -1;
  std::atomic<bool> told_heard_{false};
};

}  // namespace

int64_t run_sweep_worker(const c10::intrusive_ptr<c10d::Store>& store, const SweepSpec& spec,
                         const SweepWorkerOptions& options) {
  Worker worker(store, options);
  try {
    return worker.run(spec);
  } catch (const StoreError& error) {
    throw parallel::PeerFailure(error.what());
  }
}

}  // namespace rematlab::launch
