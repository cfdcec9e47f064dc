#include "cli/sweep_distributed.h"

#include <signal.h>

#include <algorithm>
#include <exception>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/cli_output.h"
#include "cli/run_distributed.h"
#include "cli/store_output.h"
#include "common/current_exception.h"
#include "common/errors.h"
#include "launch/local_launcher.h"
#include "launch/rank_launch.h"
#include "launch/sweep_coordinator.h"
#include "launch/sweep_worker.h"
#include "parallel/dist_errors.h"
#include "parallel/rendezvous_store.h"
#include "store/peak_flops_registry.h"
#include "store/run_store.h"
#include "store/run_writer.h"

namespace rematlab::cli {
namespace {

void note(const std::string& line) { std::cerr << line << std::endl; }

// The expanded sweep with what the coordinator resolves once for every worker: the threads a
// point gets when the spec leaves them to LibTorch (`threads_each`, 0: leave them), and the
// peak FLOP/s its MFU is taken against, measured here before any worker runs, while the
// machine is quiet.
std::vector<SweepPoint> resolved_points(const SweepSpec& spec, int threads_each, RunStore& store) {
  std::vector<std::string> skipped;
  std::vector<SweepPoint> points = expand_sweep(spec, &skipped);
  for (const std::string& line : skipped) note("skipped: " + line);
  for (SweepPoint& point : points) {
    if (point.config.threads == 0) point.config.threads = threads_each;
    resolve_peak_flops(point.config, &store);
  }
  return points;
}

std::unique_ptr<RunStore> open_store(const std::string& db) {
  auto store = std::make_unique<RunStore>(db);
  if (store->recovered_runs() > 0) {
    std::cerr << store->recovered_runs() << " run(s) left running by a process that ended are "
              << "now marked interrupted" << std::endl;
  }
  return store;
}

launch::SweepCoordinatorOptions coordinator_options(const SweepRunOptions& options,
                                                    const std::atomic<bool>& cancel) {
  launch::SweepCoordinatorOptions coordinator;
  coordinator.timeout = options.timeout;
  coordinator.cancel = &cancel;
  coordinator.on_progress = print_sweep_progress;
  coordinator.on_note = note;
  return coordinator;
}

// Rank 0's coordinator, on a thread of its own while the rank works on the main one. Stopped
// and joined whatever happens; an error it met is rethrown by `join`.
class CoordinatorThread {
 public:
  explicit CoordinatorThread(launch::SweepCoordinator& coordinator)
      : coordinator_(coordinator), thread_([this] { loop(); }) {}
  ~CoordinatorThread() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  CoordinatorThread(const CoordinatorThread&) = delete;
  CoordinatorThread& operator=(const CoordinatorThread&) = delete;

  // Waits until the sweep is finished (or the coordinator failed); returns what it failed with.
  std::exception_ptr wait() {
    if (thread_.joinable()) thread_.join();
    return error_;
  }
  // Stops it; returns what it failed with, if it failed.
  std::exception_ptr stop() {
    stop_ = true;
    return wait();
  }

 private:
  void loop() {
    try {
      while (!stop_) {
        coordinator_.pump();
        if (coordinator_.finished()) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } catch (...) {
      error_ = std::current_exception();
      // The workers, this process's own included, stop with this reason.
      coordinator_.abandon(describe_current_exception());
    }
  }

  launch::SweepCoordinator& coordinator_;
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace

void print_sweep_outcome(const std::string& db, std::optional<int64_t> experiment_id,
                         const std::vector<SweepRunResult>& results, std::size_t planned,
                         bool json) {
  std::cout << "Experiment " << experiment_id.value_or(0) << " in " << db << ": " << results.size()
            << " of " << planned << " runs\n\n"
            << format_strategy_table(results);
  const bool cancelled = std::any_of(results.begin(), results.end(), [](const auto& r) {
    return r.summary.status == RunStatus::kCancelled;
  });
  if (cancelled || results.size() < planned) {
    std::cout << "(stopped" << (cancelled ? ": cancelled" : "") << " with " << results.size()
              << " of " << planned << " runs started)\n";
  }
  if (json) {
    print_json_line(
        {{"experiment_id", experiment_id.value_or(0)}, {"runs", strategy_rows_json(results)}});
  }
}

int sweep_with_local_workers(const SweepSpec& spec, int workers, const SweepRunOptions& options,
                             const std::atomic<bool>& cancel) {
  // A point on "cuda" trains on its worker's cuda:LOCAL_RANK: a GPU for every worker. Checked
  // before the database is touched.
  for (const SweepPoint& point : expand_sweep(spec)) {
    if (point.config.device != "cuda") continue;
    launch::check_local_ranks(point.config.device, workers, "--workers", "--device");
    break;
  }
  std::unique_ptr<RunStore> store = open_store(options.db);
  RunWriter writer(options.db);
  // One worker per slice of the host's cores, as `run --nproc` gives each rank its share.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads_each = std::max(1, cores / workers);
  std::vector<SweepPoint> points = resolved_points(spec, threads_each, *store);
  const std::size_t planned = points.size();

  const parallel::LauncherStore served = parallel::serve_launcher_store();
  launch::SweepCoordinatorOptions coordinator_setup = coordinator_options(options, cancel);
  // Only our own children are killed, and only while not reaped: a reaped pid may be another's.
  launch::LiveChildren children;
  coordinator_setup.on_lost = [&children](int pid) { children.signal(pid, SIGKILL); };
  launch::SweepCoordinator coordinator(served.store.store, spec, std::move(points), &writer,
                                       coordinator_setup);
  launch::LocalLaunch launch;
  launch.nproc = workers;
  launch.args = own_command_line_without("--workers");
  launch.cancel = &cancel;
  launch.store = &served;
  launch.label = "worker";
  launch.children = &children;
  launch.independent = true;
  launch.on_tick = [&] { coordinator.pump(); };
  launch.on_ended = [&](int, int pid, bool clean, const std::string& how) {
    const bool was_worker = coordinator.worker_ended(pid, how);
    if (clean) return false;
    // The sweep goes on: a fresh worker takes the place of one that died running a point.
    if (was_worker && coordinator.work_left()) {
      note(how + "; a fresh worker takes its place");
      return true;
    }
    note(how);
    return false;
  };
  launch::launch_local(launch);
  coordinator.settle_ended_workers();
  writer.flush();
  print_sweep_outcome(options.db, coordinator.experiment_id(), coordinator.results(), planned,
                      options.json);
  if (coordinator.work_left()) {
    std::cerr << "rematlab-cli: error: every worker ended before the sweep did; see their "
                 "lines above"
              << std::endl;
    return 1;
  }
  return 0;
}

int sweep_as_worker(const SweepSpec& spec, const parallel::DistEnv& env,
                    const SweepRunOptions& options, const std::atomic<bool>& cancel) {
  // Our own launcher records the sweep; under torchrun or Slurm rank 0 does.
  const bool coordinates = env.launcher != "rematlab" && env.rank == 0;
  std::unique_ptr<RunStore> store;
  if (coordinates) store = open_store(options.db);  // refused before anyone waits on us
  parallel::RendezvousStore rendezvous =
      parallel::open_rendezvous_store(env, options.timeout, &cancel);
  launch::SweepWorkerOptions worker_options{options.timeout, &cancel, env.rank, env.local_rank};
  if (!coordinates) {
    try {
      launch::run_sweep_worker(rendezvous.store, spec, worker_options);
      return 0;
    } catch (const parallel::PeerFailure& failure) {
      std::cerr << "rematlab-cli: error: " << failure.what() << std::endl;
      return parallel::kExitPeerFailed;
    }
  }
  RunWriter writer(options.db);
  std::vector<SweepPoint> points = resolved_points(spec, 0, *store);
  const std::size_t planned = points.size();
  launch::SweepCoordinatorOptions coordinator_setup = coordinator_options(options, cancel);
  coordinator_setup.expected_workers = env.world_size;
  // Its own connection: the worker below blocks on its own while waiting for an answer.
  launch::SweepCoordinator coordinator(rendezvous.store->clone(), spec, std::move(points), &writer,
                                       coordinator_setup);
  // The coordinator's own error (its database) is this rank's failure, not a peer's. Under
  // Slurm this process serves the store: it stays until the workers have read why, whether its
  // own worker noticed the failure or had already finished.
  const auto fail_as_coordinator = [&](const std::exception_ptr& error) {
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    while (!coordinator.abandon_heard() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::rethrow_exception(error);
  };
  CoordinatorThread thread(coordinator);
  try {
    launch::run_sweep_worker(rendezvous.store, spec, worker_options);
  } catch (const parallel::PeerFailure& failure) {
    if (const std::exception_ptr error = thread.stop()) fail_as_coordinator(error);
    std::cerr << "rematlab-cli: error: " << failure.what() << std::endl;
    return parallel::kExitPeerFailed;
  }
  if (const std::exception_ptr error = thread.wait()) fail_as_coordinator(error);
  writer.flush();
  print_sweep_outcome(options.db, coordinator.experiment_id(), coordinator.results(), planned,
                      options.json);
  return 0;
}

}  // namespace rematlab::cli
