// Stopping and exposure, on the real binary: SIGTERM, SIGHUP and a Ctrl-C at any moment (the
// first second included) end a run, a launch or a sweep `cancelled` with every completed step
// recorded and nothing left behind; profiling heeds the first Ctrl-C; a launch listens on
// loopback only and a rank with another secret is refused; ranks told other world sizes, and a
// rendezvous that accepts but never answers, are one line each within the timeout.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "child_process.h"
#include "cli_runner.h"
#include "common/posix_files.h"
#include "scratch_dir.h"
#include "store/run_store.h"

namespace rematlab {
namespace {

using testing::ChildProcess;
using testing::count_lines;
using testing::kTiny;
using testing::last_line_json;
using testing::processes_with;
using testing::ScratchDir;
using testing::slurp;
using testing::wait_until;
using Clock = std::chrono::steady_clock;

std::vector<std::string> cli_command(const std::string& arguments) {
  std::vector<std::string> args = {REMATLAB_CLI_PATH};
  std::istringstream in(arguments);
  for (std::string word; in >> word;) args.push_back(word);
  return args;
}

// Waits for `text` in the file a process writes its stderr to (false if it ended first).
bool wait_for_output(ChildProcess& process, const std::string& err, const std::string& text) {
  return wait_until(
             [&] {
               return slurp(err).find(text) != std::string::npos ||
                      process.wait_for(std::chrono::milliseconds(0)).has_value();
             },
             std::chrono::seconds(120)) &&
         slurp(err).find(text) != std::string::npos;
}

// The socket inodes a process holds open.
std::set<std::string> socket_inodes(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
  for (const std::string& fd : files::list(fds)) {
    char target[256] = {};
    const ssize_t length = ::readlink((fds + "/" + fd).c_str(), target, sizeof target - 1);
    const std::string link(target, length > 0 ? static_cast<std::size_t>(length) : 0);
    if (link.rfind("socket:[", 0) == 0) inodes.insert(link.substr(8, link.size() - 9));
  }
  return inodes;
}

struct Listener {
  std::string address;  // as /proc/net/tcp* writes it: hex address and port
  bool loopback = false;
};

// The listening TCP sockets among `inodes`, from the kernel's socket tables.
std::vector<Listener> listeners(const std::set<std::string>& inodes) {
  std::vector<Listener> found;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state != "0A" || inodes.count(inode) == 0) continue;  // 0A: LISTEN
      const std::string host = local.substr(0, local.find(':'));
      // 127.x.x.x is stored little-endian (0100007F); ::1 as 32 hex digits ending in 01000000.
      const bool loopback = (host.size() == 8 && host.substr(6) == "7F") ||
                            host == "00000000000000000000000001000000";
      found.push_back({std::string(table) + " " + local, loopback});
    }
  }
  return found;
}

class SignalCase {
 public:
  explicit SignalCase(const std::string& name) : dir_(name), tmp_(dir_.file("tmp")) {
    files::make_directories(tmp_);
  }
  std::string file(const std::string& name) const { return dir_.file(name); }
  std::string db() const { return dir_.file("runs.sqlite"); }
  std::string err(int i = 0) const { return dir_.file("err" + std::to_string(i)); }
  std::string out(int i = 0) const { return dir_.file("out" + std::to_string(i)); }
  std::unique_ptr<ChildProcess> start(const std::string& arguments,
                                      std::vector<std::string> env = {}, int i = 0) const {
    env.push_back("TMPDIR=" + tmp_);
    return std::make_unique<ChildProcess>(cli_command(arguments), env, out(i), err(i));
  }
  // Nothing of the case is left: no process, no temporary file.
  void expect_nothing_left() const {
    EXPECT_TRUE(wait_until([&] { return processes_with("TMPDIR=" + tmp_).empty(); },
                           std::chrono::seconds(10)))
        << "a process was left running";
    EXPECT_TRUE(files::list(tmp_).empty()) << "a temporary file was left";
  }
  std::string marker() const { return "TMPDIR=" + tmp_; }

 private:
  ScratchDir dir_;
  std::string tmp_;
};

// The last step a run's progress lines report ("step 7/100000" → 7), 0 when none.
int64_t last_step_printed(const std::string& err) {
  int64_t last = 0;
  for (auto at = err.find("step "); at != std::string::npos; at = err.find("step ", at + 1)) {
    const std::size_t digits = at + 5;
    const std::size_t slash = err.find('/', digits);
    if (slash == std::string::npos || slash == digits ||
        err.find_first_not_of("0123456789", digits) != slash) {
      continue;
    }
    last = std::stoll(err.substr(digits, slash - digits));
  }
  return last;
}

// A run stopped by `signal` mid-training: exit 0, recorded cancelled with every step it printed,
// and no offload folder left.
void expect_stopped_and_recorded(int signal) {
  SignalCase scratch("signal-run-" + std::to_string(signal));
  const std::string offload = scratch.file("offload");
  files::make_directories(offload);
  auto run = scratch.start("run " + std::string(kTiny) +
                           " --steps 100000 --checkpoint every:1 --offload disk:" + offload +
                           " --db " + scratch.db());
  ASSERT_TRUE(wait_for_output(*run, scratch.err(), "step 4/")) << slurp(scratch.err());
  ASSERT_FALSE(files::list(offload).empty()) << "the run offloads nothing to see removed";
  ASSERT_EQ(::kill(run->pid(), signal), 0);
  const std::optional<int> code = run->exit_code(std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value()) << "the run did not stop";
  EXPECT_EQ(*code, 0) << slurp(scratch.err());
  const int64_t printed = last_step_printed(slurp(scratch.err()));
  RunStore store(scratch.db(), StoreAccess::kReadOnly, false);
  const RunRecord run_record = store.runs().at(0);
  EXPECT_EQ(run_record.status, RunStatus::kCancelled) << run_record.message;
  EXPECT_EQ(static_cast<int64_t>(store.steps(run_record.id).size()), printed)
      << "a completed step was not recorded";
  EXPECT_TRUE(files::list(offload).empty()) << "the offload folder was left";
  scratch.expect_nothing_left();
}

TEST(Signals, SigtermMidRunRecordsEveryStepCancelledAndRemovesTheOffloadFolder) {
  expect_stopped_and_recorded(SIGTERM);
}

TEST(Signals, SighupMidRunDoesTheSame) { expect_stopped_and_recorded(SIGHUP); }

TEST(Signals, SigtermMidLaunchEndsEveryRankCancelled) {
  SignalCase scratch("signal-launch");
  auto launcher =
      scratch.start("run " + std::string(kTiny) +
                    " --nproc 2 --steps 100000 --checkpoint every:1 --db " + scratch.db());
  ASSERT_TRUE(wait_for_output(*launcher, scratch.err(), "[rank 0] step 3/"))
      << slurp(scratch.err());
  ASSERT_EQ(::kill(launcher->pid(), SIGTERM), 0);
  const std::optional<int> code = launcher->exit_code(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value()) << "the launch did not stop";
  EXPECT_EQ(*code, 0) << slurp(scratch.err());
  RunStore store(scratch.db(), StoreAccess::kReadOnly, false);
  const RunRecord run = store.runs().at(0);
  EXPECT_EQ(run.status, RunStatus::kCancelled) << run.message;
  EXPECT_GE(store.steps(run.id).size(), 3u);
  EXPECT_EQ(static_cast<int64_t>(store.steps(run.id).size()), run.result.steps_completed);
  scratch.expect_nothing_left();
}

// Stages wait on one another inside a step, so a pipeline is cancelled between steps: a Ctrl-C
// in its first step (the run recorded, no step yet) ends it cancelled after that step at most,
// with every rank gone and nothing left.
TEST(Signals, CtrlCInAPipelinesFirstStepEndsItCancelled) {
  SignalCase scratch("signal-pipeline");
  auto launcher = scratch.start(
      "run --preset small --layers 4 --seq-len 256 --batch 4 --threads 1 --nproc 2 --pp 2 "
      "--accum 4 --steps 100000 --dist-timeout 30 --db " +
      scratch.db());
  const auto recorded = [&] {
    if (!files::exists(scratch.db())) return false;
    try {
      RunStore store(scratch.db(), StoreAccess::kReadOnly, false);
      const std::vector<RunRecord> runs = store.runs();
      return runs.size() == 1 && store.steps(runs[0].id).empty();
    } catch (const std::exception&) {
      return false;  // rank 0 is still creating it
    }
  };
  ASSERT_TRUE(wait_until(recorded, std::chrono::seconds(60))) << slurp(scratch.err());
  ASSERT_EQ(::kill(launcher->pid(), SIGINT), 0);
  const std::optional<int> code = launcher->exit_code(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value()) << "the pipeline did not stop";
  EXPECT_EQ(*code, 0) << slurp(scratch.err());
  RunStore store(scratch.db(), StoreAccess::kReadOnly, false);
  const RunRecord run = store.runs().at(0);
  EXPECT_EQ(run.status, RunStatus::kCancelled) << run.message;
  EXPECT_LE(store.steps(run.id).size(), 1u);
  EXPECT_EQ(static_cast<int64_t>(store.steps(run.id).size()), run.result.steps_completed);
  scratch.expect_nothing_left();
}

TEST(Signals, SigtermMidSweepCancelsThePointWithItsSteps) {
  SignalCase scratch("signal-sweep");
  std::ofstream(scratch.file("spec.json"))
      << R"({"base": {"preset": "tiny", "steps": 100000, "threads": 1},
             "axes": {"checkpoint": ["every:1", "none"]}})";
  auto sweep = scratch.start("sweep --spec " + scratch.file("spec.json") + " --db " + scratch.db());
  ASSERT_TRUE(wait_for_output(*sweep, scratch.err(), "step 3/")) << slurp(scratch.err());
  ASSERT_EQ(::kill(sweep->pid(), SIGTERM), 0);
  const std::optional<int> code = sweep->exit_code(std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << slurp(scratch.err());
  RunStore store(scratch.db(), StoreAccess::kReadOnly, false);
  const std::vector<RunRecord> runs = store.runs();
  ASSERT_EQ(runs.size(), 1u) << "the sweep went on after the signal";
  EXPECT_EQ(runs[0].status, RunStatus::kCancelled);
  EXPECT_GE(store.steps(runs[0].id).size(), 3u);
  EXPECT_EQ(static_cast<int64_t>(store.steps(runs[0].id).size()), runs[0].result.steps_completed);
  scratch.expect_nothing_left();
}

// Ctrl-C reaches the launcher alone (its ranks have their own process groups); whenever it
// comes, before the ranks can handle it or after, the launch ends cancelled, never as a crash.
// The one moment no program can answer is before its main() runs (the dynamic loader is still
// mapping LibTorch): the launcher then dies of the signal as any program would, having started
// and written nothing.
TEST(Signals, CtrlCAtAnyMomentOfALaunchEndsItCancelled) {
  int launches_answered = 0;
  // The later delays land after main() even on a loaded machine (the loader then takes more
  // than a second), so that enough of them test a launcher that answers.
  for (const int delay_ms : {0, 100, 200, 300, 400, 500, 650, 800, 1000, 1300, 1700, 2500, 3500}) {
    SignalCase scratch("signal-early-" + std::to_string(delay_ms));
    auto launcher =
        scratch.start("run " + std::string(kTiny) +
                      " --nproc 2 --steps 100000 --dist-timeout 20 --db " + scratch.db());
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ASSERT_EQ(::kill(launcher->pid(), SIGINT), 0);
    const std::optional<int> status = launcher->wait_for(std::chrono::seconds(60));
    ASSERT_TRUE(status.has_value()) << delay_ms << " ms: the launch did not stop";
    const std::string err = slurp(scratch.err());
    if (WIFSIGNALED(*status)) {
      EXPECT_EQ(WTERMSIG(*status), SIGINT) << delay_ms << " ms";
      EXPECT_TRUE(err.empty()) << delay_ms << " ms: it had started: " << err;
      EXPECT_FALSE(files::exists(scratch.db())) << delay_ms << " ms";
    } else {
      ++launches_answered;
      // Stopped while training (a cancelled run, exit 0) or before the ranks began (nothing
      // recorded, exit 130): never a failure.
      const int code = WEXITSTATUS(*status);
      EXPECT_TRUE(code == 0 || code == 130) << delay_ms << " ms: " << err;
      if (code == 130) {
        EXPECT_NE(err.find("stopped before the ranks began training"), std::string::npos)
            << delay_ms << " ms: " << err;
      }
      EXPECT_EQ(err.find("killed by signal"), std::string::npos) << delay_ms << " ms: " << err;
      EXPECT_EQ(err.find("exited with code"), std::string::npos) << delay_ms << " ms: " << err;
      if (files::exists(scratch.db())) {
        RunStore store(scratch.db(), StoreAccess::kReadOnly, false);
        for (const RunRecord& run : store.runs()) {
          EXPECT_EQ(run.status, RunStatus::kCancelled) << delay_ms << " ms: " << run.message;
        }
      }
    }
    scratch.expect_nothing_left();
  }
  EXPECT_GE(launches_answered, 5) << "too few signals reached a launcher that had started";
}

TEST(Signals, TheFirstCtrlCStopsAProfileAndKeepsNothing) {
  SignalCase scratch("signal-profile");
  for (const std::string& arguments :
       {std::string("plan --preset small --threads 1 --repeats 50 --budget 100MiB --db "),
        std::string("run --preset small --threads 1 --checkpoint plan:100MiB --db ")}) {
    auto profiling = scratch.start(arguments + scratch.db());
    // Past LibTorch's start, into the profile (a stop before it begins stops it all the same).
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    ASSERT_FALSE(profiling->wait_for(std::chrono::milliseconds(0))) << slurp(scratch.err());
    ASSERT_EQ(::kill(profiling->pid(), SIGINT), 0);
    const auto sent = Clock::now();
    const std::optional<int> code = profiling->exit_code(std::chrono::seconds(60));
    ASSERT_TRUE(code.has_value()) << arguments << ": the first Ctrl-C was ignored";
    EXPECT_LT(Clock::now() - sent, std::chrono::seconds(20)) << arguments;
    EXPECT_EQ(*code, 130) << arguments << ": " << slurp(scratch.err());
    EXPECT_NE(slurp(scratch.err()).find("stopped while profiling"), std::string::npos)
        << slurp(scratch.err());
  }
  if (files::exists(scratch.db())) {
    RunStore store(scratch.db(), StoreAccess::kReadOnly, false);
    EXPECT_TRUE(store.chain_profiles().empty()) << "a stopped profile was kept";
    EXPECT_TRUE(store.runs().empty()) << "a run was recorded for a stopped profile";
  }
  scratch.expect_nothing_left();
}

TEST(Signals, ASweepPointThatProfilesIsCancelledByTheFirstCtrlC) {
  SignalCase scratch("signal-sweep-profile");
  std::ofstream(scratch.file("spec.json"))
      << R"({"base": {"preset": "small", "steps": 3, "threads": 1},
             "axes": {"checkpoint": ["plan:100MiB", "none"]}})";
  auto sweep = scratch.start("sweep --spec " + scratch.file("spec.json") + " --db " + scratch.db());
  ASSERT_TRUE(wait_for_output(*sweep, scratch.err(), "profiling")) << slurp(scratch.err());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(sweep->pid(), SIGINT), 0);
  const std::optional<int> code = sweep->exit_code(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value()) << "the first Ctrl-C was ignored";
  EXPECT_EQ(*code, 0) << slurp(scratch.err());
  RunStore store(scratch.db(), StoreAccess::kReadOnly, false);
  const std::vector<RunRecord> runs = store.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, RunStatus::kCancelled) << runs[0].message;
  EXPECT_NE(runs[0].message.find("profiled"), std::string::npos) << runs[0].message;
  EXPECT_TRUE(store.chain_profiles().empty());
  scratch.expect_nothing_left();
}

// A rank waiting for the others (rank 0 never comes) heeds a SIGTERM, as torchrun's or Slurm's
// single stop signal sends it, instead of waiting out the timeout.
TEST(Signals, ARankWaitingForTheOthersStopsAtTheFirstSigterm) {
  SignalCase scratch("signal-waiting");
  const int port = testing::free_port();
  auto rank1 = scratch.start(
      "run " + std::string(kTiny) + " --steps 2 --dist-timeout 60",
      {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)});
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // past its start, waiting
  ASSERT_FALSE(rank1->wait_for(std::chrono::milliseconds(0))) << slurp(scratch.err());
  ASSERT_EQ(::kill(rank1->pid(), SIGTERM), 0);
  const auto sent = Clock::now();
  const std::optional<int> code = rank1->exit_code(std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_LT(Clock::now() - sent, std::chrono::seconds(5));
  EXPECT_EQ(*code, 130) << slurp(scratch.err());
  EXPECT_NE(slurp(scratch.err()).find("stopped while waiting for the other ranks"),
            std::string::npos)
      << slurp(scratch.err());
  scratch.expect_nothing_left();
}

TEST(Exposure, ALaunchListensOnLoopbackOnly) {
  SignalCase scratch("exposure");
  auto launcher =
      scratch.start("run " + std::string(kTiny) +
                    " --nproc 2 --steps 100000 --checkpoint every:1 --db " + scratch.db());
  ASSERT_TRUE(wait_for_output(*launcher, scratch.err(), "[rank 1] step 3/"))
      << slurp(scratch.err());
  std::vector<Listener> open;
  for (const pid_t pid : processes_with(scratch.marker())) {
    for (const Listener& listener : listeners(socket_inodes(pid))) open.push_back(listener);
  }
  EXPECT_GE(open.size(), 3u) << "the store and each rank's Gloo listener were not found";
  for (const Listener& listener : open) {
    EXPECT_TRUE(listener.loopback) << "listening beyond this host: " << listener.address;
  }
  ::kill(launcher->pid(), SIGTERM);
  ASSERT_TRUE(launcher->exit_code(std::chrono::seconds(60)).has_value());
  scratch.expect_nothing_left();
}

std::vector<std::string> rank_env(int rank, int world, int port, const std::string& secret = "") {
  std::vector<std::string> env = {"RANK=" + std::to_string(rank),
                                  "WORLD_SIZE=" + std::to_string(world), "MASTER_ADDR=127.0.0.1",
                                  "MASTER_PORT=" + std::to_string(port)};
  if (!secret.empty()) env.push_back("REMATLAB_LAUNCH_SECRET=" + secret);
  return env;
}

TEST(Exposure, ARankWithAnotherSecretIsRefused) {
  SignalCase scratch("secret");
  const int port = testing::free_port();
  const std::string run = "run " + std::string(kTiny) + " --steps 2 --dist-timeout 5";
  auto rank0 = scratch.start(run, rank_env(0, 2, port, "0123456789abcdef0123"), 0);
  // Rank 1 joins once rank 0 has opened the launch.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  auto rank1 = scratch.start(run, rank_env(1, 2, port, "fedcba9876543210fedc"), 1);
  const std::optional<int> refused = rank1->exit_code(std::chrono::seconds(30));
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(*refused, 2) << slurp(scratch.err(1));
  EXPECT_EQ(count_lines(slurp(scratch.err(1))), 1) << slurp(scratch.err(1));
  EXPECT_NE(slurp(scratch.err(1))
                .find("REMATLAB_LAUNCH_SECRET: the rendezvous at 127.0.0.1:" +
                      std::to_string(port) + " belongs to a launch with another"),
            std::string::npos)
      << slurp(scratch.err(1));
  // Rank 0 never saw it join.
  const std::optional<int> alone = rank0->exit_code(std::chrono::seconds(30));
  ASSERT_TRUE(alone.has_value());
  EXPECT_EQ(*alone, 4) << slurp(scratch.err(0));
  EXPECT_NE(slurp(scratch.err(0)).find("rank(s) 1 of 2 did not join"), std::string::npos)
      << slurp(scratch.err(0));
  scratch.expect_nothing_left();
}

TEST(Exposure, RanksToldOtherWorldSizesNameTheSetting) {
  SignalCase scratch("world-sizes");
  const int port = testing::free_port();
  const std::string run = "run " + std::string(kTiny) + " --steps 2 --dist-timeout 10";
  auto rank0 = scratch.start(run, rank_env(0, 2, port), 0);
  auto rank1 = scratch.start(run, rank_env(1, 3, port), 1);
  for (int i = 0; i < 2; ++i) {
    ChildProcess& rank = i == 0 ? *rank0 : *rank1;
    const std::optional<int> code = rank.exit_code(std::chrono::seconds(30));
    ASSERT_TRUE(code.has_value());
    const std::string err = slurp(scratch.err(i));
    EXPECT_EQ(*code, 2) << err;
    EXPECT_EQ(count_lines(err), 1) << err;
    EXPECT_NE(err.find("WORLD_SIZE: rank"), std::string::npos) << err;
    EXPECT_EQ(err.find("gloo"), std::string::npos) << err;
  }
  scratch.expect_nothing_left();
}

// Accepts connections and never says a word.
class SilentServer {
 public:
  SilentServer() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::listen(fd_, 16);
    socklen_t length = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        const int client = ::accept(fd_, nullptr, nullptr);
        if (client >= 0) clients_.push_back(client);
      }
    });
  }
  ~SilentServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
    for (const int client : clients_) ::close(client);
  }
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<int> clients_;
  std::thread thread_;
};

TEST(Exposure, ARendezvousThatNeverAnswersEndsWithinTheTimeoutInOneLine) {
  SignalCase scratch("silent");
  SilentServer server;
  const auto start = Clock::now();
  auto rank1 = scratch.start("run " + std::string(kTiny) + " --steps 2 --dist-timeout 3",
                             rank_env(1, 2, server.port()));
  const std::optional<int> code = rank1->exit_code(std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value()) << "still waiting after 30 s";
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  const std::string err = slurp(scratch.err());
  EXPECT_EQ(*code, 4) << err;
  EXPECT_EQ(count_lines(err), 1) << err;
  EXPECT_NE(err.find("did not answer within 3 s"), std::string::npos) << err;
  EXPECT_EQ(err.find("Exception raised from"), std::string::npos) << err;
  EXPECT_EQ(err.find("frame #"), std::string::npos) << err;
}

}  // namespace
}  // namespace rematlab
