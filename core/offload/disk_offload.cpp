#include "offload/disk_offload.h"

#include <ATen/ThreadLocalState.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "common/errors.h"
#include "common/posix_files.h"
#include "common/process_identity.h"
#include "memory/memory_phase.h"
#include "offload/stash_ledger.h"

namespace rematlab {
namespace {

constexpr const char* kDirectoryPrefix = "rematlab-offload-";
constexpr const char* kOwnerFile = "owner";

// Closes a descriptor on every path.
class Descriptor {
 public:
  explicit Descriptor(int fd = -1) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(Descriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Descriptor& operator=(Descriptor&&) = delete;
  Descriptor(const Descriptor&) = delete;
  int get() const { return fd_; }
  bool close() { return ::close(std::exchange(fd_, -1)) == 0; }

 private:
  int fd_;
};

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t wrote = ::write(fd, data, size);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return false;
    data += wrote;
    size -= static_cast<std::size_t>(wrote);
  }
  return true;
}

bool read_all(int fd, char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t got = ::read(fd, data, size);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    data += got;
    size -= static_cast<std::size_t>(got);
  }
  return true;
}

// "host pid start_ticks": who made an offload directory (see process_identity.h).
std::string owner_text(const ProcessIdentity& owner) {
  return owner.host + " " + std::to_string(owner.pid) + " " + std::to_string(owner.start_ticks) +
         "\n";
}

// One stashed tensor. `tensor` holds the device tensor until it is written, and the loaded one
// once it is read back.
struct Entry {
  enum class State { kWriting, kOnDisk, kReading, kLoaded, kFailed };
  State state = State::kWriting;
  bool counted = false;  // its bytes are in the store's held (offloaded) bytes
  torch::Tensor tensor;
  std::string path;
  int64_t bytes = 0;
  std::vector<int64_t> sizes;
  at::ScalarType dtype = at::kFloat;
  c10::Device device{c10::kCPU};
  std::string error;
};

// Work for the background thread: write an entry out, or read it back.
struct Task {
  enum Kind { kWrite, kRead };
  std::shared_ptr<Entry> entry;
  Kind kind = kWrite;
};

class DiskOffloadCore {
 public:
  DiskOffloadCore(std::string directory, Descriptor owner_lock, const DiskOffloadOptions& options)
      : directory_(std::move(directory)),
        owner_lock_(std::move(owner_lock)),
        fail_after_bytes_(options.fail_after_bytes),
        write_delay_(options.write_delay_for_tests),
        thread_state_(),  // the trainer thread's state: the memory tracker sees the worker too
        worker_([this] { work(); }) {}

  ~DiskOffloadCore() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    worker_.join();
    files::remove_tree(directory_);
  }

  const std::string& directory() const { return directory_; }

  std::shared_ptr<Entry> stash(const torch::Tensor& input) {
    auto entry = std::make_shared<Entry>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failure_.empty()) throw OffloadError(failure_);
      entry->tensor = input.detach();
      entry->bytes = static_cast<int64_t>(input.nbytes());
      entry->sizes = input.sizes().vec();
      entry->dtype = input.scalar_type();
      entry->device = input.device();
      entry->path =
          files::join(directory_, "segment-input-" + std::to_string(next_file_++) + ".bin");
      ledger_.stashed(entry);
      tasks_.push_back({entry, Task::kWrite});
    }
    wake_.notify_all();
    return entry;
  }

  torch::Tensor fetch(const std::shared_ptr<Entry>& entry) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto ready = [&] {
      if (entry->state == Entry::State::kOnDisk) schedule_read_locked(entry);  // write just ended
      return entry->state == Entry::State::kLoaded || entry->state == Entry::State::kFailed;
    };
    if (!ready()) {
      ScopedMemoryPhase phase(MemoryPhase::kOffloadWait);
      const auto start = std::chrono::steady_clock::now();
      done_.wait(lock, ready);
      ledger_.waited(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    if (entry->state == Entry::State::kFailed) throw OffloadError(entry->error);
    torch::Tensor result = std::move(entry->tensor);
    remove_file_locked(*entry);
    // Backward visits segments in reverse: bring the previous one in while this one computes.
    if (auto previous = ledger_.before(entry)) schedule_read_locked(previous);
    return result;
  }

  void begin_backward() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto last = ledger_.last()) schedule_read_locked(last);
  }

  // The ticket is gone (backward is done with it, or its graph was dropped): once a write or
  // read in flight has finished, nothing of the entry may remain, so a cancelled step leaves no
  // files behind by the time its graph is freed.
  void abandon(const std::shared_ptr<Entry>& entry) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] {
      return entry->state != Entry::State::kWriting && entry->state != Entry::State::kReading;
    });
    entry->tensor = torch::Tensor();
    remove_file_locked(*entry);
  }

  void reset_step_counters() {
    std::lock_guard<std::mutex> lock(mutex_);
    ledger_.reset_step();
  }
  int64_t peak_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return ledger_.peak_bytes();
  }
  double wait_ms() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return ledger_.wait_ms();
  }

 private:
  void schedule_read_locked(const std::shared_ptr<Entry>& entry) {
    if (entry->state != Entry::State::kOnDisk) return;
    entry->state = Entry::State::kReading;
    tasks_.push_back({entry, Task::kRead});
    wake_.notify_all();
  }

  void remove_file_locked(Entry& entry) {
    if (entry.path.empty()) return;
    files::remove_file(entry.path);
    entry.path.clear();
    if (entry.counted) ledger_.release(entry.bytes);
    entry.counted = false;
  }

  void work() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopping and drained
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      at::ThreadLocalStateGuard state(thread_state_);
      try {
        task.kind == Task::kWrite ? write(*task.entry) : read(*task.entry);
      } catch (const std::exception& error) {
        // Never let an exception end the process, and never leave the entry in flight: its
        // fetcher (or the ticket's destructor) is waiting for it to settle.
        std::lock_guard<std::mutex> lock(mutex_);
        task.entry->tensor = torch::Tensor();
        task.entry->error = std::string("offload: ") + error.what();
        task.entry->state = Entry::State::kFailed;
        if (failure_.empty()) failure_ = task.entry->error;
        done_.notify_all();
      }
    }
  }

  void write(Entry& entry) {
    torch::Tensor host;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      host = entry.tensor;
    }
    host = host.to(torch::kCPU).contiguous();
    if (write_delay_.count() > 0) std::this_thread::sleep_for(write_delay_);
    std::string error = write_file(entry.path, host);
    host = torch::Tensor();
    std::lock_guard<std::mutex> lock(mutex_);
    entry.tensor = torch::Tensor();  // the device copy is freed here, on the writer thread
    if (!error.empty()) {
      files::remove_file(entry.path);
      entry.path.clear();
      entry.error = error;
      entry.state = Entry::State::kFailed;
      if (failure_.empty()) failure_ = error;
    } else {
      entry.state = Entry::State::kOnDisk;
      entry.counted = true;
      ledger_.hold(entry.bytes);
    }
    done_.notify_all();
  }

  std::string write_file(const std::string& path, const torch::Tensor& host) {
    const int64_t bytes = static_cast<int64_t>(host.nbytes());
    if (fail_after_bytes_ >= 0 && written_bytes_ + bytes > fail_after_bytes_) {
      return "offload: cannot write " + path + ": no space left on device (injected)";
    }
    // Exclusive and without following links: nothing planted in the directory is written to.
    Descriptor file(
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (file.get() < 0) return "offload: cannot create " + path + ": " + std::strerror(errno);
    const bool ok = write_all(file.get(), static_cast<const char*>(host.data_ptr()),
                              static_cast<std::size_t>(bytes));
    const int saved_errno = errno;
    const bool closed = file.close();
    if (!ok || !closed) {
      return "offload: cannot write " + path + ": " + std::strerror(ok ? errno : saved_errno);
    }
    written_bytes_ += bytes;
    return "";
  }

  void read(Entry& entry) {
    std::string path;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      path = entry.path;
    }
    std::string error;
    torch::Tensor loaded = torch::empty(entry.sizes, torch::TensorOptions().dtype(entry.dtype));
    Descriptor file(path.empty() ? -1 : ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (file.get() < 0 ||
        !read_all(file.get(), static_cast<char*>(loaded.data_ptr()), loaded.nbytes())) {
      error = "offload: cannot read back " + path + ": " + std::strerror(errno);
    }
    if (error.empty() && !entry.device.is_cpu()) loaded = loaded.to(entry.device);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error.empty()) {
      entry.error = error;
      entry.state = Entry::State::kFailed;
    } else {
      entry.tensor = std::move(loaded);
      entry.state = Entry::State::kLoaded;
    }
    done_.notify_all();
  }

  const std::string directory_;
  Descriptor owner_lock_;  // flock held while the store lives: the directory is in use
  const int64_t fail_after_bytes_;
  const std::chrono::milliseconds write_delay_;
  at::ThreadLocalState thread_state_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the worker waits for tasks
  std::condition_variable done_;  // fetchers wait for their entry
  std::deque<Task> tasks_;
  StashLedger<Entry> ledger_;
  std::string failure_;  // first write error: later stashes fail fast
  int64_t next_file_ = 0;
  int64_t written_bytes_ = 0;  // worker only
  bool stopping_ = false;
  std::thread worker_;  // last: starts once everything above exists
};

class DiskTicket : public OffloadTicket {
 public:
  DiskTicket(std::shared_ptr<DiskOffloadCore> core, std::shared_ptr<Entry> entry)
      : core_(std::move(core)), entry_(std::move(entry)) {}
  ~DiskTicket() override { core_->abandon(entry_); }
  torch::Tensor fetch() override { return core_->fetch(entry_); }

 private:
  std::shared_ptr<DiskOffloadCore> core_;
  std::shared_ptr<Entry> entry_;
};

class DiskOffloadStore : public OffloadStore {
 public:
  explicit DiskOffloadStore(std::shared_ptr<DiskOffloadCore> core) : core_(std::move(core)) {}
  std::shared_ptr<OffloadTicket> stash(const torch::Tensor& input) override {
    return std::make_shared<DiskTicket>(core_, core_->stash(input));
  }
  void begin_backward() override { core_->begin_backward(); }
  void reset_step_counters() override { core_->reset_step_counters(); }
  int64_t offloaded_peak_bytes() const override { return core_->peak_bytes(); }
  double wait_ms() const override { return core_->wait_ms(); }
  const std::string& directory() const { return core_->directory(); }

 private:
  std::shared_ptr<DiskOffloadCore> core_;
};

std::string random_name() {
  std::random_device entropy;
  char name[32];
  std::snprintf(name, sizeof name, "%08x%08x", entropy(), entropy());
  return name;
}

// Makes the run's directory, refusing anything that is already there, and its locked owner file.
std::pair<std::string, Descriptor> create_owned_directory(const std::string& parent,
                                                          const std::string& name) {
  const std::string directory = files::join(parent, kDirectoryPrefix + name);
  if (::mkdir(directory.c_str(), 0700) != 0) {
    const int reason = errno;
    if (reason == EEXIST) {
      throw InvalidInput("--offload",
                         "'" + directory + "' already exists (" +
                             (files::is_directory(directory) ? "a folder" : "not a folder") +
                             "); an offload directory is never reused");
    }
    throw InvalidInput("--offload", "cannot create an offload directory under '" + parent +
                                        "': " + std::strerror(reason));
  }
  const std::string owner = files::join(directory, kOwnerFile);
  Descriptor lock(
      ::open(owner.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  const std::string text = owner_text(current_process());
  // Blocking: a concurrent cleanup may hold the lock for the moment it takes to see the file new.
  if (lock.get() < 0 || ::flock(lock.get(), LOCK_EX) != 0 ||
      !write_all(lock.get(), text.data(), text.size())) {
    const int reason = errno;
    files::remove_tree(directory);
    throw InvalidInput("--offload", "cannot set up '" + directory + "': " + std::strerror(reason));
  }
  return {directory, std::move(lock)};
}

// Whether the offload directory `path` is certainly abandoned (see the header for the rules).
bool abandoned(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != ::geteuid()) {
    return false;  // a symlink, a file or somebody else's: not ours to remove
  }
  Descriptor owner(
      ::open(files::join(path, kOwnerFile).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (owner.get() < 0) return false;  // not (yet) a directory this version made
  if (::flock(owner.get(), LOCK_EX | LOCK_NB) != 0) return false;  // its store is alive
  char text[512] = {};
  if (::read(owner.get(), text, sizeof text - 1) <= 0) return false;  // being set up right now
  char host[256] = {};
  long long pid = 0;
  long long start_ticks = 0;
  if (std::sscanf(text, "%255s %lld %lld", host, &pid, &start_ticks) != 3) return false;
  // A lock alone is not proof on shared storage (flock across hosts depends on the file system):
  // another host's directory is never ours to judge.
  if (host != current_process().host) return false;
  return !process_may_be_alive({host, pid, start_ticks});
}

}  // namespace

std::unique_ptr<OffloadStore> make_disk_offload_store(const DiskOffloadOptions& options) {
  const std::string parent = options.parent.empty() ? files::temp_directory() : options.parent;
  const std::string error = files::make_directories(parent);
  if (!error.empty()) {
    throw InvalidInput("--offload", "cannot create the offload folder '" + parent + "': " + error);
  }
  remove_stale_offload_directories(parent);
  auto [directory, lock] = create_owned_directory(
      parent, options.name_for_tests.empty() ? random_name() : options.name_for_tests);
  return std::make_unique<DiskOffloadStore>(
      std::make_shared<DiskOffloadCore>(directory, std::move(lock), options));
}

std::string disk_offload_directory(const OffloadStore& store) {
  return dynamic_cast<const DiskOffloadStore&>(store).directory();
}

int remove_stale_offload_directories(const std::string& parent) {
  int removed = 0;
  for (const std::string& name : files::list(parent)) {
    if (name.rfind(kDirectoryPrefix, 0) != 0) continue;
    const std::string path = files::join(parent, name);
    if (!abandoned(path)) continue;
    files::remove_tree(path);
    ++removed;
  }
  return removed;
}

}  // namespace rematlab
