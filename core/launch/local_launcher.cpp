#include "launch/local_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "launch/step_feed.h"
#include "parallel/dist_env.h"
#include "parallel/dist_errors.h"

extern char** environ;

namespace rematlab::launch {
namespace {

using Clock = std::chrono::steady_clock;

// A pipe end that closes itself.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.fd_;
      other.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct Stream {
  Fd fd;
  std::string pending;  // a partial line
  bool to_stdout = false;
  std::string error;  // the last error the process reported (rematlab-cli's one line)
};

constexpr std::string_view kErrorPrefix = "rematlab-cli: error: ";

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  bool killed_by_us = false;
  int status = 0;
  Stream out, err;
};

// argv and envp built before fork: between fork and exec only async-signal-safe calls are made.
struct ExecImage {
  std::vector<std::string> storage;
  std::vector<char*> argv, envp;
};

ExecImage exec_image(const LocalLaunch& launch, int rank, const parallel::LauncherStore& served) {
  ExecImage image;
  const std::vector<std::string> ours = {
      "RANK=" + std::to_string(rank),
      "LOCAL_RANK=" + std::to_string(rank),
      "WORLD_SIZE=" + std::to_string(launch.nproc),
      "LOCAL_WORLD_SIZE=" + std::to_string(launch.nproc),
      "MASTER_ADDR=127.0.0.1",
      "MASTER_PORT=" + std::to_string(served.port),
      std::string(parallel::kSecretVariable) + "=" + served.secret,
      "TORCHELASTIC_USE_AGENT_STORE=True",
      "TORCHELASTIC_RESTART_COUNT=0",
      std::string(parallel::kLauncherVariable) + "=1",
      std::string(kStepFeedVariable) + (launch.on_rank_step ? "=1" : "=0"),
  };
  std::vector<std::string> env;
  bool threads_given = false;
  bool nccl_interface_given = false;
  for (char** entry = environ; *entry; ++entry) {
    const std::string item = *entry;
    const std::string name = item.substr(0, item.find('='));
    bool replaced = false;
    for (const std::string& mine : ours) replaced = replaced || mine.rfind(name + "=", 0) == 0;
    if (name == "TORCHELASTIC_RUN_ID") replaced = true;
    threads_given = threads_given || name == "OMP_NUM_THREADS";
    nccl_interface_given = nccl_interface_given || name == "NCCL_SOCKET_IFNAME";
    if (!replaced) env.push_back(item);
  }
  for (const std::string& mine : ours) env.push_back(mine);
  if (!threads_given) {
    // Ranks share the host's cores instead of each taking all of them.
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    env.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1u, cores / launch.nproc)));
  }
  // NCCL's bootstrap listens too: on this host's loopback, like everything else of the launch.
  if (!nccl_interface_given) env.push_back("NCCL_SOCKET_IFNAME=lo");
  image.storage = launch.args;
  const std::size_t arg_count = image.storage.size();
  image.storage.insert(image.storage.end(), env.begin(), env.end());
  for (std::size_t i = 0; i < image.storage.size(); ++i) {
    (i < arg_count ? image.argv : image.envp).push_back(image.storage[i].data());
  }
  image.argv.push_back(nullptr);
  image.envp.push_back(nullptr);
  return image;
}

void make_pipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("cannot create a pipe for a rank: ") +
                             std::strerror(errno));
  }
  read_end = Fd(fds[0]);
  write_end = Fd(fds[1]);
}

void write_all(int fd, const std::string& text) {
  const char* data = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t written = ::write(fd, data, left);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;
    data += written;
    left -= static_cast<std::size_t>(written);
  }
}

void emit(const std::string& label, const Rank& rank, Stream& stream, const std::string& line) {
  if (line.rfind(kErrorPrefix, 0) == 0) stream.error = line.substr(kErrorPrefix.size());
  if (stream.to_stdout) {
    write_all(STDOUT_FILENO, line + "\n");  // rank 0's stdout is the run's result
  } else {
    write_all(STDERR_FILENO, "[" + label + " " + std::to_string(rank.rank) + "] " + line + "\n");
  }
}

// Reads what is there; returns false at end of file.
bool drain(const std::string& label, const Rank& rank, Stream& stream) {
  char buffer[4096];
  const ssize_t got = ::read(stream.fd.get(), buffer, sizeof buffer);
  if (got < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (got <= 0) {
    if (!stream.pending.empty()) emit(label, rank, stream, stream.pending);
    stream.pending.clear();
    stream.fd.reset();
    return false;
  }
  stream.pending.append(buffer, static_cast<std::size_t>(got));
  std::size_t newline;
  while ((newline = stream.pending.find('\n')) != std::string::npos) {
    emit(label, rank, stream, stream.pending.substr(0, newline));
    stream.pending.erase(0, newline + 1);
  }
  return true;
}

// Relays what an ended process left in its pipe, so that its last words are read before it is
// described (poll first: a process it started could still hold the pipe open).
void drain_ended(const std::string& label, const Rank& rank, Stream& stream) {
  while (stream.fd.get() >= 0) {
    pollfd fd{stream.fd.get(), POLLIN, 0};
    if (::poll(&fd, 1, 0) <= 0 || !drain(label, rank, stream)) return;
  }
}

std::string who(const std::string& label, const Rank& rank) {
  return label + " " + std::to_string(rank.rank) + " (pid " + std::to_string(rank.pid) + ")";
}

std::string describe_exit(const std::string& label, const Rank& rank) {
  const std::string name = who(label, rank);
  if (WIFSIGNALED(rank.status)) {
    const int signal = WTERMSIG(rank.status);
    return name + " was killed by signal " + std::to_string(signal) + " (" + ::strsignal(signal) +
           ")";
  }
  const std::string code = name + " exited with code " + std::to_string(WEXITSTATUS(rank.status));
  // Its own reason, which a caller that shows no rank's output (the window) would lose.
  return rank.err.error.empty() ? code : code + ": " + rank.err.error;
}

// The signals that stop a launch. A rank is started with them blocked: one that arrives before
// the rank has installed its handler (LibTorch takes a second to load) then waits, pending, and
// cancels the rank once it can, instead of killing it as if it had crashed.
sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, signal);
  return set;
}

// Blocks the stop signals on this thread while it lives: the child forked meanwhile inherits
// the mask, and one sent to the launcher waits until the mask is restored.
class StopSignalsBlocked {
 public:
  StopSignalsBlocked() {
    const sigset_t stop = stop_signals();
    ::pthread_sigmask(SIG_BLOCK, &stop, &previous_);
  }
  ~StopSignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  StopSignalsBlocked(const StopSignalsBlocked&) = delete;
  StopSignalsBlocked& operator=(const StopSignalsBlocked&) = delete;

 private:
  sigset_t previous_;
};

// What a child whose exec failed reports to the launcher through a close-on-exec pipe: nothing
// (the exec closed it) or this.
struct ExecFailure {
  int error = 0;        // errno of execve
  bool orphan = false;  // the launcher was gone before the exec
};

// Starts `rank` (its number set): pipes for its output, fork, exec. Throws std::runtime_error
// naming the program and the reason when it cannot be started.
void start_rank(Rank& rank, const LocalLaunch& launch, const parallel::LauncherStore& served,
                pid_t launcher) {
  ExecImage image = exec_image(launch, rank.rank, served);
  Fd out_write, err_write, failure_read, failure_write;
  make_pipe(rank.out.fd, out_write);
  make_pipe(rank.err.fd, err_write);
  make_pipe(failure_read, failure_write);
  rank.out.to_stdout = rank.rank == 0;
  pid_t pid = -1;
  {
    const StopSignalsBlocked blocked;
    pid = ::fork();
    if (pid == 0) {
      // Async-signal-safe calls only. Its own process group, so a terminal's Ctrl-C reaches the
      // launcher alone, which forwards it once; killed with the launcher, whatever kills it.
      ::dup2(out_write.get(), STDOUT_FILENO);
      ::dup2(err_write.get(), STDERR_FILENO);
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ExecFailure failure;
      if (::getppid() != launcher) {
        failure.orphan = true;
      } else {
        ::execve(image.argv[0], image.argv.data(), image.envp.data());
        failure.error = errno;
      }
      [[maybe_unused]] const ssize_t told = ::write(failure_write.get(), &failure, sizeof failure);
      ::_exit(127);
    }
  }
  if (pid < 0) {
    throw std::runtime_error("cannot start " + launch.label + " " + std::to_string(rank.rank) +
                             ": " + std::strerror(errno));
  }
  rank.pid = pid;
  rank.running = true;
  if (launch.children) launch.children->add(pid);
  // The exec closes the child's end; anything read says why it did not happen.
  failure_write.reset();
  ExecFailure failure;
  ssize_t got = 0;
  do {
    got = ::read(failure_read.get(), &failure, sizeof failure);
  } while (got < 0 && errno == EINTR);
  if (got == static_cast<ssize_t>(sizeof failure)) {
    throw std::runtime_error(
        "cannot start " + launch.label + " " + std::to_string(rank.rank) + ": " +
        (failure.orphan ? std::string("the launcher ended first")
                        : "'" + launch.args.front() + "': " + std::strerror(failure.error)));
  }
}

// Reaps `rank` if it has ended (blocking: wait for it); returns whether it was reaped.
bool reap(Rank& rank, const LocalLaunch& launch, bool block) {
  const int options = block ? 0 : WNOHANG;
  const pid_t reaped = launch.children ? launch.children->reap(rank.pid, &rank.status, options)
                                       : ::waitpid(rank.pid, &rank.status, options);
  if (reaped != rank.pid) return false;
  rank.running = false;
  return true;
}

}  // namespace

bool LiveChildren::signal(int pid, int number) {
  // Under the lock: the launcher cannot reap it in between.
  std::lock_guard<std::mutex> lock(mutex_);
  return pids_.count(pid) > 0 && ::kill(pid, number) == 0;
}

bool LiveChildren::contains(int pid) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pids_.count(pid) > 0;
}

void LiveChildren::add(int pid) {
  std::lock_guard<std::mutex> lock(mutex_);
  pids_.insert(pid);
}

int LiveChildren::reap(int pid, int* status, int options) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int reaped = ::waitpid(pid, status, options);
  if (reaped == pid) pids_.erase(pid);
  return reaped;
}

namespace {

// Watches a launch's processes until every one has ended: relays their output, passes their
// live steps on, forwards a stop, names the first failure, restarts what the caller asks to
// and kills what is still there a grace after a failure or a stop.
class Supervisor {
 public:
  Supervisor(const LocalLaunch& launch, const parallel::LauncherStore& served)
      : launch_(launch), served_(served), store_(served.store.store), launcher_(::getpid()) {}
  // Whatever ends the launch early (starting a process fails, a hook throws), no process it
  // started is left running.
  ~Supervisor() {
    for (Rank& rank : ranks_) {
      if (!rank.running) continue;
      ::kill(rank.pid, SIGKILL);
      reap(rank, launch_, true);
    }
  }
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  LaunchOutcome run() {
    ranks_.resize(static_cast<std::size_t>(launch_.nproc));
    for (int index = 0; index < launch_.nproc; ++index) {
      ranks_[static_cast<std::size_t>(index)].rank = index;
      start_rank(ranks_[static_cast<std::size_t>(index)], launch_, served_, launcher_);
    }
    while (relay_output()) {
      if (launch_.on_tick) launch_.on_tick();
      pass_steps();
      forward_stop();
      reap_ended();
      kill_past_deadline();
    }
    pass_steps();  // the last ones, sent just before the processes ended
    finish();
    return outcome_;
  }

 private:
  // One round of relaying what the processes wrote (waits up to 100 ms for it); false once
  // nothing runs and nothing is left to read.
  bool relay_output() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, Stream*>> owners;
    for (Rank& rank : ranks_) {
      for (Stream* stream : {&rank.out, &rank.err}) {
        if (stream->fd.get() < 0) continue;
        fds.push_back({stream->fd.get(), POLLIN, 0});
        owners.emplace_back(&rank, stream);
      }
    }
    bool any_running = false;
    for (const Rank& rank : ranks_) any_running = any_running || rank.running;
    if (!any_running && fds.empty()) return false;
    const int ready = ::poll(fds.data(), fds.size(), 100);
    for (std::size_t i = 0; ready > 0 && i < fds.size(); ++i) {
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
        drain(launch_.label, *owners[i].first, *owners[i].second);
    }
    return true;
  }

  void pass_steps() {
    if (!launch_.on_rank_step) return;
    std::vector<std::pair<int, StepMetrics>> steps;
    try {
      steps = take_published_steps(*store_);
    } catch (const std::exception&) {
      return;  // the live view misses them; the run itself goes on
    }
    for (const auto& [rank, step] : steps) launch_.on_rank_step(rank, step);
  }

  // The caller's stop reaches every process once, as SIGINT; one that does not stop at its
  // next micro-batch is killed after the grace.
  void forward_stop() {
    if (!launch_.cancel || !launch_.cancel->load() || cancel_forwarded_) return;
    cancel_forwarded_ = true;
    for (const Rank& rank : ranks_) {
      if (rank.running) ::kill(rank.pid, SIGINT);
    }
    if (!deadline_) {
      deadline_ = Clock::now() + launch_.grace;
      deadline_from_stop_ = true;
    }
  }

  void reap_ended() {
    std::vector<int> restarts;
    for (Rank& rank : ranks_) {
      if (!rank.running || !reap(rank, launch_, false)) continue;
      drain_ended(launch_.label, rank, rank.err);
      const bool clean = WIFEXITED(rank.status) && WEXITSTATUS(rank.status) == 0;
      if (launch_.independent) {
        if (launch_.on_ended &&
            launch_.on_ended(rank.rank, rank.pid, clean, describe_exit(launch_.label, rank)))
          restarts.push_back(rank.rank);
        continue;
      }
      const bool peer =
          WIFEXITED(rank.status) && WEXITSTATUS(rank.status) == parallel::kExitPeerFailed;
      // A rank the forwarded stop reached before it had anything to record ends 130: stopped,
      // not failed.
      if (cancel_forwarded_ && WIFEXITED(rank.status) &&
          WEXITSTATUS(rank.status) == parallel::kExitInterrupted) {
        outcome_.stopped_before_start = true;
        continue;
      }
      if (!clean && !peer && !rank.killed_by_us)
        name_failure(rank, describe_exit(launch_.label, rank));
      if (!clean && !deadline_) deadline_ = Clock::now() + launch_.grace;
    }
    for (const int number : restarts) {
      // A fresh entry: the old one's pipes may still hold output to relay.
      ranks_.emplace_back();
      ranks_.back().rank = number;
      start_rank(ranks_.back(), launch_, served_, launcher_);
    }
  }

  // Still there a grace after another process failed, or after the stop: it hangs. Killed, and
  // named if nobody else was.
  void kill_past_deadline() {
    if (!deadline_ || Clock::now() <= *deadline_) return;
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(launch_.grace).count();
    for (Rank& rank : ranks_) {
      if (!rank.running || rank.killed_by_us) continue;
      rank.killed_by_us = true;
      ::kill(rank.pid, SIGKILL);
      name_failure(rank,
                   who(launch_.label, rank) +
                       (deadline_from_stop_
                            ? " did not stop within " + std::to_string(seconds) +
                                  " s of being asked to and was killed"
                            : " stopped responding and was killed " + std::to_string(seconds) +
                                  " s after the first " + launch_.label + " stopped"),
                   deadline_from_stop_);
    }
  }

  void name_failure(const Rank& rank, const std::string& text, bool after_stop = false) {
    if (outcome_.failed_rank >= 0) return;
    outcome_.ok = false;
    outcome_.killed_after_stop = after_stop;
    outcome_.failed_rank = rank.rank;
    outcome_.failure = text;
    outcome_.failed_by_signal = WIFSIGNALED(rank.status);
    outcome_.failed_exit_code = WIFEXITED(rank.status) ? WEXITSTATUS(rank.status) : 1;
    outcome_.named_while_rank0_alive = ranks_.front().running;
    try {
      store_->set(kFailureKey, text);  // rank 0 names it in the run's record
    } catch (const std::exception&) {
      // The ranks then report a peer failure without a name.
    }
  }

  // Every process has ended: how rank 0 ended, a failure nobody was named for, the run.
  void finish() {
    const Rank& first = ranks_.front();
    outcome_.rank0_signalled = WIFSIGNALED(first.status);
    outcome_.rank0_exit_code = WIFEXITED(first.status) ? WEXITSTATUS(first.status) : 1;
    if (outcome_.ok && !launch_.independent) {
      for (const Rank& rank : ranks_) {
        if (WIFEXITED(rank.status) &&
            (WEXITSTATUS(rank.status) == 0 ||
             (cancel_forwarded_ && WEXITSTATUS(rank.status) == parallel::kExitInterrupted)))
          continue;
        outcome_.ok = false;  // every failure was a "peer failed": unusual, but not a success
        if (outcome_.failure.empty()) outcome_.failure = describe_exit(launch_.label, rank);
      }
    }
    try {
      if (store_->check({kRunIdKey})) outcome_.run_id = std::stoll(store_->get_to_str(kRunIdKey));
    } catch (const std::exception&) {
      // No run recorded.
    }
  }

  const LocalLaunch& launch_;
  const parallel::LauncherStore& served_;
  const c10::intrusive_ptr<c10d::Store> store_;
  const pid_t launcher_;
  std::vector<Rank> ranks_;
  LaunchOutcome outcome_;
  std::optional<Clock::time_point> deadline_;
  bool cancel_forwarded_ = false;
  bool deadline_from_stop_ = false;  // the grace began with the stop, not with a failure
};

}  // namespace

LaunchOutcome launch_local(const LocalLaunch& launch) {
  if (launch.nproc < 1 || launch.args.empty())
    throw std::logic_error("launch_local: nothing to run");
  // The store, served on a free port: every rank is a client of it.
  std::optional<parallel::LauncherStore> own_store;
  if (!launch.store) own_store = parallel::serve_launcher_store();
  return Supervisor(launch, launch.store ? *launch.store : *own_store).run();
}

}  // namespace rematlab::launch
