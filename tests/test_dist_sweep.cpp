// A sweep spread over workers, at the protocol's level (core/launch/sweep_protocol.h): the
// coordinator against workers played by the test through an in-process store, the real worker
// against a coordinator that failed, and the launcher's list of children it may still signal.
// What is checked: a worker holding a point is hung when it stops making progress (not when a
// thread of it still beats, unless that beat is the setup beat it sends only while building a
// point's model), a `done` read after its sender was reaped still counts, a reaped
// worker's pid is never signalled, a point's run records the worker's host and pid (where it was
// measured), a run may still be going only while both its worker and its coordinator live (even
// when the worker is on a host nobody here can check), and a coordinator's own failure reaches
// the workers with its reason.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "child_process.h"
#include "common/errors.h"
#include "common/process_identity.h"
#include "launch/local_launcher.h"
#include "launch/sweep_coordinator.h"
#include "launch/sweep_protocol.h"
#include "launch/sweep_worker.h"
#include "parallel/dist_errors.h"
#include "scratch_dir.h"
#include "store/run_store.h"
#include "store/run_writer.h"
#include "store/sqlite_db.h"
#include "store/step_fields.h"
#include "sweep/point_wire.h"

namespace rematlab {
namespace {

using Clock = std::chrono::steady_clock;
using testing::ScratchDir;

SweepSpec point_spec(const std::string& batches) {
  return parse_sweep_spec(nlohmann::ordered_json::parse(
      R"({"name": "protocol", "base": {"preset": "tiny", "layers": 2, "d_model": 32,
          "heads": 2, "seq_len": 16, "vocab": 64, "batch": 2, "steps": 3},
          "axes": {"batch": )" +
      batches + "}}"));
}
SweepSpec two_point_spec() { return point_spec("[1, 2]"); }

std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

// A worker process as the coordinator sees it: what it sends through the store.
struct FakeWorker {
  c10::intrusive_ptr<c10d::Store> store;
  int64_t rank = 0;
  ProcessIdentity process;
  int64_t id = -1;
  int64_t asked = 0;

  void send(nlohmann::json event) {
    event["worker"] = id;
    store->queuePush(launch::kEventsQueue, bytes_of(event.dump()));
  }
  // Asks for a point, without waiting for the answer.
  void say_ready() {
    if (id < 0) id = store->add(launch::kWorkerIdsKey, 1) - 1;
    send({{"kind", "ready"},
          {"ask", asked},
          {"rank", rank},
          {"host", process.host},
          {"pid", process.pid},
          {"start_ticks", process.start_ticks}});
  }
  // Asks for a point; returns its index (-1: none left).
  int64_t ask(launch::SweepCoordinator& coordinator) {
    say_ready();
    coordinator.pump();
    return std::stoll(store->get_to_str(launch::assign_key(id, asked++)));
  }
  void step(int64_t point, int64_t index) {
    StepMetrics metrics;
    metrics.step = index;
    metrics.loss = 1.0;
    send({{"kind", "step"}, {"point", point}, {"step", step_to_json(metrics)}});
  }
  void done(int64_t point, const RunConfig& config) {
    PointOutcome outcome;
    outcome.summary.status = RunStatus::kOk;
    outcome.summary.config = config;
    send({{"kind", "done"}, {"point", point}, {"outcome", to_json(outcome)}});
  }
};

ProcessIdentity some_process(int64_t pid) { return {"elsewhere", pid, 0}; }

const SweepRunResult* result_of(const std::vector<SweepRunResult>& results, int64_t index,
                                const std::vector<SweepPoint>& points) {
  for (const SweepRunResult& result : results) {
    if (result.point.label == points.at(static_cast<std::size_t>(index)).label) return &result;
  }
  return nullptr;
}

void pump_for(launch::SweepCoordinator& coordinator, std::chrono::milliseconds how_long,
              const std::function<void()>& meanwhile = {}) {
  const auto end = Clock::now() + how_long;
  while (Clock::now() < end) {
    if (meanwhile) meanwhile();
    coordinator.pump();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TEST(SweepCoordinator, AWorkerThatStopsMakingProgressIsHungAndKilledOneThatStepsOrBuildsIsNot) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const SweepSpec spec = point_spec("[1, 2, 3]");
  const std::vector<SweepPoint> points = expand_sweep(spec);
  std::vector<int> killed;
  launch::SweepCoordinatorOptions options;
  options.timeout = std::chrono::milliseconds(400);
  options.on_lost = [&](int pid) { killed.push_back(pid); };
  launch::SweepCoordinator coordinator(store, spec, points, nullptr, options);
  FakeWorker silent{store, 0, some_process(1001)};
  FakeWorker stepping{store, 1, some_process(1002)};
  FakeWorker building{store, 2, some_process(1003)};
  const int64_t silent_point = silent.ask(coordinator);
  const int64_t stepping_point = stepping.ask(coordinator);
  const int64_t building_point = building.ask(coordinator);
  ASSERT_GE(silent_point, 0);
  ASSERT_GE(stepping_point, 0);
  ASSERT_GE(building_point, 0);
  // Three timeouts long: one steps every 50 ms, one builds its model (setup beats), the other
  // sends nothing (its training thread deadlocked, whatever other threads of it do).
  int64_t steps = 0;
  pump_for(coordinator, std::chrono::milliseconds(1200), [&] {
    stepping.step(stepping_point, steps++);
    building.send({{"kind", "setup"}, {"point", building_point}});
  });
  EXPECT_EQ(killed, std::vector<int>{1001});
  const std::vector<SweepRunResult> results = coordinator.results();
  const SweepRunResult* hung = result_of(results, silent_point, points);
  ASSERT_NE(hung, nullptr);
  EXPECT_EQ(hung->summary.status, RunStatus::kFailed);
  EXPECT_NE(hung->summary.message.find("worker 0 (pid 1001 on elsewhere) stopped making progress"),
            std::string::npos)
      << hung->summary.message;
  EXPECT_FALSE(coordinator.finished()) << "the other workers' points are still running";
  stepping.done(stepping_point, points[static_cast<std::size_t>(stepping_point)].config);
  building.done(building_point, points[static_cast<std::size_t>(building_point)].config);
  coordinator.pump();
  const std::vector<SweepRunResult> after = coordinator.results();
  for (const int64_t point : {stepping_point, building_point}) {
    const SweepRunResult* ok = result_of(after, point, points);
    ASSERT_NE(ok, nullptr);
    EXPECT_EQ(ok->summary.status, RunStatus::kOk) << ok->summary.message;
  }
  EXPECT_TRUE(coordinator.finished());
}

TEST(SweepCoordinator, ADoneReadAfterItsWorkerWasReapedStillCounts) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const SweepSpec spec = two_point_spec();
  const std::vector<SweepPoint> points = expand_sweep(spec);
  launch::SweepCoordinatorOptions options;
  options.settle = std::chrono::milliseconds(300);
  launch::SweepCoordinator coordinator(store, spec, points, nullptr, options);
  FakeWorker finishing{store, 0, some_process(2001)};
  FakeWorker dying{store, 1, some_process(2002)};
  const int64_t finished_point = finishing.ask(coordinator);
  const int64_t dying_point = dying.ask(coordinator);
  // Both reaped; the first one's `done` reaches the store only now, as one sent just before the
  // end can (the store serves each connection on its own).
  EXPECT_TRUE(coordinator.worker_ended(2001, "worker 0 (pid 2001) exited with code 0"));
  EXPECT_TRUE(
      coordinator.worker_ended(2002, "worker 1 (pid 2002) was killed by signal 9 (Killed)"));
  finishing.done(finished_point, points[static_cast<std::size_t>(finished_point)].config);
  const auto before = Clock::now();
  coordinator.settle_ended_workers();
  EXPECT_LT(Clock::now() - before, std::chrono::seconds(2));
  const std::vector<SweepRunResult> results = coordinator.results();
  const SweepRunResult* done = result_of(results, finished_point, points);
  const SweepRunResult* died = result_of(results, dying_point, points);
  ASSERT_NE(done, nullptr);
  ASSERT_NE(died, nullptr);
  EXPECT_EQ(done->summary.status, RunStatus::kOk) << done->summary.message;
  EXPECT_EQ(died->summary.status, RunStatus::kFailed);
  EXPECT_EQ(died->summary.message,
            "worker 1 (pid 2002 on elsewhere) was killed by signal 9 (Killed)");
  EXPECT_TRUE(coordinator.finished());
  // An ended worker's late "ready" is given nothing.
  EXPECT_EQ(finishing.ask(coordinator), -1);
}

TEST(SweepCoordinator, AWorkerReapedBeforeItsFirstAskWasReadIsGivenNothingAndIsReplaced) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const SweepSpec spec = two_point_spec();
  const std::vector<SweepPoint> points = expand_sweep(spec);
  launch::SweepCoordinatorOptions options;
  options.settle = std::chrono::milliseconds(100);
  launch::SweepCoordinator coordinator(store, spec, points, nullptr, options);
  // Killed right after it asked: its `ready` is still queued when the launcher reaps it.
  FakeWorker dying{store, 0, some_process(5001)};
  dying.say_ready();
  EXPECT_TRUE(coordinator.worker_ended(5001, "worker 0 (pid 5001) was killed by signal 9 (Killed)"))
      << "a worker, so a fresh one takes its place";
  EXPECT_EQ(std::stoll(store->get_to_str(launch::assign_key(dying.id, 0))), -1)
      << "a dead worker was handed a point";
  coordinator.settle_ended_workers();
  EXPECT_TRUE(coordinator.results().empty()) << "no point was started, none failed";
  ASSERT_TRUE(coordinator.work_left());
  FakeWorker fresh{store, 0, some_process(5002)};
  const int64_t first = fresh.ask(coordinator);
  EXPECT_EQ(first, 0) << "the fresh worker gets the first point";
  // In flight: shown as running, never as a success it has not had.
  std::vector<SweepRunResult> results = coordinator.results();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].summary.status, RunStatus::kRunning);
  EXPECT_FALSE(coordinator.finished());
  fresh.done(first, points[0].config);
  coordinator.pump();
  results = coordinator.results();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].summary.status, RunStatus::kOk);
}

TEST(SweepCoordinator, AWorkerKilledAfterStopBecauseItDidNotStopInTimeCancelsItsPoint) {
  ScratchDir dir("distsweep-stop");
  const std::string db = dir.file("runs.sqlite");
  { RunStore create(db); }
  std::atomic<bool> cancel{false};
  {
    RunWriter writer(db);
    auto store = c10::make_intrusive<c10d::HashStore>();
    const SweepSpec spec = two_point_spec();
    launch::SweepCoordinatorOptions options;
    options.settle = std::chrono::milliseconds(0);
    options.cancel = &cancel;
    launch::SweepCoordinator coordinator(store, spec, expand_sweep(spec), &writer, options);
    FakeWorker worker{store, 0, some_process(6001)};
    ASSERT_GE(worker.ask(coordinator), 0);
    // Stop pressed; the worker, in a micro-batch longer than the grace, is killed.
    cancel = true;
    EXPECT_TRUE(
        coordinator.worker_ended(6001, "worker 0 (pid 6001) was killed by signal 9 (Killed)"));
    coordinator.settle_ended_workers();
    const std::vector<SweepRunResult> results = coordinator.results();
    ASSERT_EQ(results.size(), 1u);
    EXPECT_EQ(results[0].summary.status, RunStatus::kCancelled);
    EXPECT_EQ(results[0].summary.message,
              "stopped by the user; worker 0 (pid 6001 on elsewhere) was killed by signal 9 "
              "(Killed)");
    EXPECT_FALSE(coordinator.work_left());
    writer.flush();
  }
  RunStore store(db);
  ASSERT_EQ(store.runs().size(), 1u);
  EXPECT_EQ(store.runs()[0].status, RunStatus::kCancelled);
  EXPECT_EQ(store.runs()[0].message.rfind("stopped by the user; ", 0), 0u)
      << store.runs()[0].message;
}

TEST(SweepCoordinator, AWorkerReapedAfterItStoppedProgressingIsNeverSignalled) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const SweepSpec spec = two_point_spec();
  const std::vector<SweepPoint> points = expand_sweep(spec);
  std::vector<int> killed;
  launch::SweepCoordinatorOptions options;
  options.timeout = std::chrono::milliseconds(100);
  options.settle = std::chrono::milliseconds(0);
  options.on_lost = [&](int pid) { killed.push_back(pid); };
  launch::SweepCoordinator coordinator(store, spec, points, nullptr, options);
  FakeWorker worker{store, 0, some_process(3001)};
  const int64_t point = worker.ask(coordinator);
  // Silent past the timeout, and reaped before anything checked it: its pid may belong to
  // another process by now.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(
      coordinator.worker_ended(3001, "worker 0 (pid 3001) was killed by signal 9 (Killed)"));
  coordinator.settle_ended_workers();
  EXPECT_TRUE(killed.empty()) << "signalled pid " << killed.front();
  const std::vector<SweepRunResult> results = coordinator.results();
  const SweepRunResult* failed = result_of(results, point, points);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->summary.status, RunStatus::kFailed);
  EXPECT_NE(failed->summary.message.find("was killed by signal 9"), std::string::npos)
      << failed->summary.message;
}

TEST(SweepCoordinator, APointsRunGoesOnWhileItsCoordinatorLivesAndIsEndedByIt) {
  ScratchDir dir("distsweep-identity");
  const std::string db = dir.file("runs.sqlite");
  { RunStore create(db); }
  testing::ChildProcess worker_process({"/bin/sleep", "60"}, {}, dir.file("out"), dir.file("err"));
  const ProcessIdentity self = current_process();
  RunWriter writer(db);
  auto store = c10::make_intrusive<c10d::HashStore>();
  const SweepSpec spec = two_point_spec();
  launch::SweepCoordinatorOptions options;
  options.settle = std::chrono::milliseconds(0);
  launch::SweepCoordinator coordinator(store, spec, expand_sweep(spec), &writer, options);
  FakeWorker worker{store, 0, {self.host, worker_process.pid(), 0}};
  ASSERT_GE(worker.ask(coordinator), 0);
  writer.flush();
  // The worker dies; until the coordinator (this process) has failed its point, the run is
  // still going: another process opening the database neither interrupts nor deletes it.
  ::kill(worker_process.pid(), SIGKILL);
  ASSERT_TRUE(worker_process.wait_for(std::chrono::seconds(10)).has_value());
  int64_t run_id = 0;
  {
    RunStore store_now(db);
    EXPECT_EQ(store_now.recovered_runs(), 0);
    ASSERT_EQ(store_now.runs().size(), 1u);
    run_id = store_now.runs()[0].id;
    EXPECT_EQ(store_now.runs()[0].status, RunStatus::kRunning);
    try {
      store_now.delete_runs({run_id});
      ADD_FAILURE() << "a run its coordinator is recording was deleted";
    } catch (const InvalidInput& error) {
      EXPECT_NE(std::string(error.what()).find("process " + std::to_string(self.pid)),
                std::string::npos)
          << error.what();
    }
  }
  EXPECT_TRUE(coordinator.worker_ended(static_cast<int>(worker_process.pid()),
                                       "worker 0 (pid 1) was killed by signal 9 (Killed)"));
  coordinator.settle_ended_workers();
  writer.flush();
  RunStore store_after(db);
  EXPECT_EQ(store_after.run(run_id).status, RunStatus::kFailed);
  EXPECT_EQ(store_after.run(run_id).host, self.host) << "where it was measured: the worker's";
  EXPECT_NO_THROW(store_after.delete_runs({run_id}));
}

TEST(SweepCoordinator, ARunWhoseCoordinatorEndedIsInterruptedThoughItsWorkerIsOnAnotherHost) {
  ScratchDir dir("distsweep-recorder");
  const std::string db = dir.file("runs.sqlite");
  { RunStore create(db); }
  // Played by a process of its own, so that the test can end it: the coordinator that records
  // the run while a worker on a host nobody here can check trains it.
  testing::ChildProcess coordinator_process({"/bin/sleep", "60"}, {}, dir.file("out"),
                                            dir.file("err"));
  int64_t run_id = 0;
  {
    RunWriter writer(db);
    auto store = c10::make_intrusive<c10d::HashStore>();
    const SweepSpec spec = two_point_spec();
    launch::SweepCoordinator coordinator(store, spec, expand_sweep(spec), &writer, {});
    FakeWorker worker{store, 0, some_process(4001)};
    ASSERT_GE(worker.ask(coordinator), 0);
    writer.flush();
  }
  {
    Database raw(db, Database::Mode::kReadWrite);
    raw.exec("UPDATE runs SET recorder_pid = " + std::to_string(coordinator_process.pid()) +
             ", recorder_start = 0");
  }
  {
    RunStore store(db);
    EXPECT_EQ(store.recovered_runs(), 0) << "its coordinator lives: it may still be going";
    ASSERT_EQ(store.runs().size(), 1u);
    run_id = store.runs()[0].id;
    EXPECT_EQ(store.runs()[0].status, RunStatus::kRunning);
    EXPECT_EQ(store.runs()[0].host, "elsewhere") << "where it was measured";
    try {
      store.delete_runs({run_id});
      ADD_FAILURE() << "a run whose coordinator lives was deleted";
    } catch (const InvalidInput& error) {
      EXPECT_NE(
          std::string(error.what()).find("process " + std::to_string(coordinator_process.pid())),
          std::string::npos)
          << error.what();
    }
  }
  ::kill(coordinator_process.pid(), SIGKILL);
  ASSERT_TRUE(coordinator_process.wait_for(std::chrono::seconds(10)).has_value());
  RunStore store(db);
  EXPECT_EQ(store.recovered_runs(), 1) << "nobody is left to finish it";
  EXPECT_EQ(store.run(run_id).status, RunStatus::kInterrupted);
  EXPECT_NO_THROW(store.delete_runs({run_id}));
}

// The store as a worker uses it, counting the setup beats it is sent.
class BeatCountingStore : public c10d::HashStore {
 public:
  void queuePush(const std::string& key, const std::vector<uint8_t>& value) override {
    const std::string text(value.begin(), value.end());
    if (text.find("\"setup\"") != std::string::npos) ++beats;
    c10d::HashStore::queuePush(key, value);
  }
  std::atomic<int> beats{0};
};

TEST(SweepWorker, BeatsWhileItBuildsAndProfilesAPointsModelAndOnlyThen) {
  // A plan: point profiles its model before training: several steps' worth of work that sends
  // no step. The timeout is long beside a step (a loaded machine must not fail this test), and
  // beats come four times in one.
  const SweepSpec spec = parse_sweep_spec(nlohmann::ordered_json::parse(
      R"({"name": "slow build", "base": {"preset": "tiny", "layers": 4, "d_model": 192,
          "heads": 2, "seq_len": 64, "vocab": 64, "batch": 4, "steps": 3, "threads": 1,
          "checkpoint": "plan:64MiB"}})"));
  std::vector<SweepPoint> points = expand_sweep(spec);
  ASSERT_EQ(points.size(), 1u);
  // As a coordinator resolves it before any worker starts: no peak to measure inside the run.
  points[0].config.peak_flops = 1e11;
  points[0].config.peak_flops_source = "given";
  const auto timeout = std::chrono::milliseconds(400);
  auto store = c10::make_intrusive<BeatCountingStore>();
  launch::SweepCoordinatorOptions options;
  options.timeout = timeout;
  options.expected_workers = 1;  // pumped until the worker has said goodbye
  std::vector<int> killed;
  options.on_lost = [&](int pid) { killed.push_back(pid); };
  // When the point started building (its activity), and the beats counted by its first step.
  std::optional<Clock::time_point> building, first_step;
  int beats_by_first_step = -1;
  options.on_progress = [&](const SweepProgress& progress) {
    if (!building && progress.activity.rfind("training at batch", 0) == 0) building = Clock::now();
    if (!first_step && progress.step) {
      first_step = Clock::now();
      beats_by_first_step = store->beats.load();
    }
  };
  launch::SweepCoordinator coordinator(store, spec, points, nullptr, options);
  std::exception_ptr worker_error;
  std::thread worker([&] {
    try {
      launch::run_sweep_worker(store, spec, {timeout, nullptr, 0});
    } catch (...) {
      worker_error = std::current_exception();
    }
  });
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (!coordinator.finished() && Clock::now() < deadline) {
    coordinator.pump();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  worker.join();
  if (worker_error) std::rethrow_exception(worker_error);
  ASSERT_TRUE(building && first_step) << "the point never started or never stepped";
  const auto built_in =
      std::chrono::duration_cast<std::chrono::milliseconds>(*first_step - *building);
  // A beat every quarter timeout of the build (at least one per third: on a loaded machine each
  // wait runs a little long, 32 beats in 3.47 s beside a test run), none once it trains.
  EXPECT_GE(beats_by_first_step, static_cast<int>(built_in / (timeout / 3)) - 1)
      << "built in " << built_in.count() << " ms";
  EXPECT_GE(beats_by_first_step, 1) << "built in " << built_in.count() << " ms";
  EXPECT_EQ(store->beats.load(), beats_by_first_step) << "a beat while it trained";
  EXPECT_TRUE(killed.empty());
  const std::vector<SweepRunResult> results = coordinator.results();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].summary.status, RunStatus::kOk) << results[0].summary.message;
}

TEST(SweepWorker, ACoordinatorsOwnFailureReachesTheWorkerWithItsReason) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const SweepSpec spec = two_point_spec();
  launch::SweepCoordinatorOptions options;
  options.expected_workers = 1;
  launch::SweepCoordinator coordinator(store, spec, expand_sweep(spec), nullptr, options);
  coordinator.abandon("the runs database cannot be written: disk I/O error");
  EXPECT_FALSE(coordinator.abandon_heard());
  const auto before = Clock::now();
  try {
    launch::run_sweep_worker(store, spec, {std::chrono::seconds(20), nullptr, 0});
    ADD_FAILURE() << "the worker went on";
  } catch (const parallel::PeerFailure& failure) {
    const std::string text = failure.what();
    EXPECT_NE(text.find("the coordinator failed: the runs database cannot be written: disk I/O "
                        "error"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("cannot be reached"), std::string::npos) << text;
  }
  EXPECT_LT(Clock::now() - before, std::chrono::seconds(5)) << "it did not wait for the timeout";
  EXPECT_TRUE(coordinator.abandon_heard()) << "the worker said it read why";
}

TEST(LocalLauncher, OnlyChildrenNotYetReapedCanBeSignalled) {
  ScratchDir dir("distsweep-children");
  launch::LiveChildren children;
  launch::LocalLaunch launch;
  launch.nproc = 2;
  // Worker 0 ends after 0.3 s, worker 1 two seconds later; each leaves its pid in a file.
  launch.args = {"/bin/sh", "-c", "echo $$ > " + dir.path() + "/pid$RANK; sleep $((RANK * 2)).3"};
  launch.independent = true;
  launch.label = "worker";
  launch.children = &children;
  auto pid_of = [&](int rank) {
    std::ifstream in(dir.file("pid" + std::to_string(rank)));
    int pid = 0;
    in >> pid;
    return pid;
  };
  std::vector<std::string> endings;
  launch.on_ended = [&](int rank, int pid, bool clean, const std::string& how) {
    endings.push_back(how);
    EXPECT_TRUE(clean) << how;
    EXPECT_FALSE(children.contains(pid)) << "reaped, yet still listed";
    EXPECT_FALSE(children.signal(pid, 0)) << "a reaped pid was signalled";
    if (rank == 0) {
      const int other = pid_of(1);
      EXPECT_GT(other, 0);
      EXPECT_TRUE(children.contains(other));
      EXPECT_TRUE(children.signal(other, 0)) << "a running child can be signalled";
    }
    return false;
  };
  const launch::LaunchOutcome outcome = launch::launch_local(launch);
  EXPECT_TRUE(outcome.ok) << outcome.failure;
  ASSERT_EQ(endings.size(), 2u);
  EXPECT_EQ(endings[0].rfind("worker 0 (pid ", 0), 0u) << "named as its output prefix names it";
}

TEST(LocalLauncher, AFailedRanksOwnReasonIsPartOfTheFailure) {
  launch::LocalLaunch launch;
  launch.nproc = 2;
  launch.grace = std::chrono::seconds(5);
  // Rank 1 refuses its input as rematlab-cli does, and exits at once; rank 0 would wait.
  launch.args = {"/bin/sh", "-c",
                 "if [ $RANK = 1 ]; then echo 'loading' >&2; "
                 "echo 'rematlab-cli: error: --device: cuda:1 does not exist' >&2; exit 2; "
                 "else exec sleep 30; fi"};
  const auto before = Clock::now();
  const launch::LaunchOutcome outcome = launch::launch_local(launch);
  EXPECT_LT(Clock::now() - before, std::chrono::seconds(20));
  EXPECT_FALSE(outcome.ok);
  EXPECT_EQ(outcome.failed_rank, 1);
  // Whoever shows no rank's output (the window) still has the reason.
  EXPECT_NE(outcome.failure.find("exited with code 2: --device: cuda:1 does not exist"),
            std::string::npos)
      << outcome.failure;
}

}  // namespace
}  // namespace rematlab
