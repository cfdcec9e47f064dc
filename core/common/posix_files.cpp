#include "common/posix_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "common/byte_size.h"

namespace rematlab::files {
namespace {

unsigned major_of(dev_t device) { return major(device); }
unsigned minor_of(dev_t device) { return minor(device); }

}  // namespace

std::string temp_directory() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

std::string join(const std::string& directory, const std::string& name) {
  if (directory.empty() || directory.back() == '/') return directory + name;
  return directory + "/" + name;
}

bool exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

int64_t file_size(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 ? static_cast<int64_t>(info.st_size) : -1;
}

bool is_regular_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::string make_directories(const std::string& path) {
  if (path.empty()) return "empty path";
  for (std::size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return std::strerror(errno);
    if (slash == std::string::npos) break;
  }
  return is_directory(path) ? "" : "exists and is not a directory";
}

std::vector<std::string> list(const std::string& directory) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(directory.c_str());
  if (!dir) return names;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  return names;
}

bool remove_file(const std::string& path) { return ::unlink(path.c_str()) == 0; }

void remove_tree(const std::string& path) {
  if (!exists(path)) return;
  ::nftw(
      path.c_str(),
      [](const char* item, const struct stat*, int, struct FTW*) { return std::remove(item); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat first {};
  struct stat second {};
  return ::stat(a.c_str(), &first) == 0 && ::stat(b.c_str(), &second) == 0 &&
         first.st_dev == second.st_dev && first.st_ino == second.st_ino;
}

std::string parent_directory(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// AT_EACCESS: with the effective ids and capabilities, the ones opening the file will use (plain
// access() asks with the real ones).
bool writable(const std::string& path) {
  return ::faccessat(AT_FDCWD, path.c_str(), W_OK, AT_EACCESS) == 0;
}
bool readable(const std::string& path) {
  return ::faccessat(AT_FDCWD, path.c_str(), R_OK, AT_EACCESS) == 0;
}

bool is_valid_utf8(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    int extra = 0;
    uint32_t code = 0;
    if (byte < 0x80) {
      ++i;
      continue;
    } else if ((byte & 0xE0) == 0xC0) {
      extra = 1;
      code = byte & 0x1F;
    } else if ((byte & 0xF0) == 0xE0) {
      extra = 2;
      code = byte & 0x0F;
    } else if ((byte & 0xF8) == 0xF0) {
      extra = 3;
      code = byte & 0x07;
    } else {
      return false;
    }
    if (i + static_cast<std::size_t>(extra) >= text.size()) return false;  // cut short
    for (int k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code = (code << 6) | (next & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8 either.
    static const uint32_t kSmallest[] = {0, 0x80, 0x800, 0x10000};
    if (code < kSmallest[extra] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      return false;
    }
    i += static_cast<std::size_t>(extra) + 1;
  }
  return true;
}

bool locked_by_another_process(const std::string& path, int64_t start, int64_t length) {
  // Read from /proc/locks rather than with fcntl(F_GETLK): that needs a descriptor of the file,
  // and closing it would drop every lock this process holds on it (an SQLite connection's).
  struct stat file {};
  if (::stat(path.c_str(), &file) != 0) return false;
  std::FILE* locks = std::fopen("/proc/locks", "r");
  if (!locks) return false;
  bool held = false;
  char line[512];
  while (!held && std::fgets(line, sizeof line, locks)) {
    // "3: POSIX  ADVISORY  WRITE 1234 08:01:5678 1073741824 1073742335" ("->" before a waiter).
    std::string text = line;
    const auto arrow = text.find(" -> ");
    if (arrow != std::string::npos) text.erase(arrow, 3);
    char kind[16], mode[16], access[16], range_end[32];
    long long pid = 0, lock_start = 0;
    unsigned major = 0, minor = 0;
    unsigned long long inode = 0;
    if (std::sscanf(text.c_str(), "%*d: %15s %15s %15s %lld %x:%x:%llu %lld %31s", kind, mode,
                    access, &pid, &major, &minor, &inode, &lock_start, range_end) != 9) {
      continue;
    }
    if (pid == ::getpid() || inode != file.st_ino || major != major_of(file.st_dev) ||
        minor != minor_of(file.st_dev)) {
      continue;
    }
    const long long lock_end = std::string(range_end) == "EOF"
                                   ? std::numeric_limits<long long>::max()
                                   : std::atoll(range_end);
    held = lock_start < start + length && lock_end >= start;
  }
  std::fclose(locks);
  return held;
}

std::string probe_directory_creation(const std::string& folder) {
  std::string probe = join(folder, ".rematlab-probe-XXXXXX");
  if (::mkdtemp(probe.data()) == nullptr) return std::strerror(errno);
  ::rmdir(probe.c_str());
  return "";
}

namespace {

// Closes a descriptor on every path.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes now, reporting the error a deferred write may only show here.
  bool close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }

 private:
  int fd_;
};

}  // namespace

SmallFile read_small_file(const std::string& path, int64_t largest_bytes) {
  SmallFile file;
  const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) {
    file.error = errno == ENOENT ? "no such file" : std::strerror(errno);
    return file;
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    file.error = std::strerror(errno);
    return file;
  }
  if (!S_ISREG(info.st_mode)) {
    file.error = "not a regular file";
    return file;
  }
  if (info.st_size > largest_bytes) {
    file.error = "larger than " + format_bytes(largest_bytes);
    return file;
  }
  // Read to the end, not to st_size: the file may grow meanwhile; one byte over the limit says so.
  char buffer[16384];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      file.error = std::strerror(errno);
      file.text.clear();
      return file;
    }
    if (got == 0) break;
    file.text.append(buffer, static_cast<std::size_t>(got));
    if (static_cast<int64_t>(file.text.size()) > largest_bytes) {
      file.error = "larger than " + format_bytes(largest_bytes);
      file.text.clear();
      return file;
    }
  }
  return file;
}

namespace {

// The process's umask without changing it (umask() can only be read by setting it, which would
// race with other threads creating files).
mode_t current_umask() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  unsigned mask = 022;
  if (status) {
    char line[256];
    while (std::fgets(line, sizeof line, status)) {
      if (std::sscanf(line, "Umask: %o", &mask) == 1) break;
    }
    std::fclose(status);
  }
  return static_cast<mode_t>(mask);
}

bool write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t wrote = ::write(fd, text.data() + done, text.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return false;
    done += static_cast<std::size_t>(wrote);
  }
  return true;
}

}  // namespace

namespace {

// A character device or a pipe (/dev/null, /dev/stdout, a FIFO) is written through: replacing
// it with a regular file would destroy it (as root, /dev/null) or print nothing.
std::string write_through(const std::string& path, const std::string& text) {
  // Non-blocking open: a FIFO nobody reads would block forever.
  FileDescriptor file(::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC | O_NONBLOCK));
  if (file.get() < 0) {
    return errno == ENXIO ? std::string("a pipe that nobody reads") : std::strerror(errno);
  }
  const int flags = ::fcntl(file.get(), F_GETFL);
  if (flags < 0 || ::fcntl(file.get(), F_SETFL, flags & ~O_NONBLOCK) != 0 ||
      !write_all(file.get(), text)) {
    return std::strerror(errno);
  }
  return file.close() ? "" : std::strerror(errno);
}

// This process's own descriptor when `path` names one (/dev/stdout, /dev/stderr, /dev/fd/N,
// /proc/self/fd/N): written where it stands, so a shell's `>>` appends and a pipe gets the text.
// Opening the path instead would replace or overwrite the file the descriptor points to.
int own_descriptor(const std::string& path) {
  if (path == "/dev/stdout") return STDOUT_FILENO;
  if (path == "/dev/stderr") return STDERR_FILENO;
  for (const std::string prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (path.rfind(prefix, 0) != 0 || path.size() == prefix.size() ||
        path.size() > prefix.size() + 6)
      continue;
    const std::string number = path.substr(prefix.size());
    if (number.find_first_not_of("0123456789") == std::string::npos) return std::stoi(number);
  }
  return -1;
}

// `mode`: the permissions of the file replaced, or of any new file when there was none.
std::string replace_atomically(const std::string& path, const std::string& text, mode_t mode) {
  std::string temporary = join(parent_directory(path), ".rematlab-tmp-XXXXXX");
  FileDescriptor file(::mkstemp(temporary.data()));  // O_EXCL: never through a planted link
  if (file.get() < 0) return std::strerror(errno);
  // mkstemp makes the file private.
  const bool ok = ::fchmod(file.get(), mode) == 0 && write_all(file.get(), text) &&
                  ::fsync(file.get()) == 0 && file.close() &&
                  ::rename(temporary.c_str(), path.c_str()) == 0;
  const int reason = errno;
  if (!ok) {
    ::unlink(temporary.c_str());
    return std::strerror(reason);
  }
  FileDescriptor folder(::open(parent_directory(path).c_str(), O_RDONLY | O_DIRECTORY));
  if (folder.get() >= 0) ::fsync(folder.get());
  return "";
}

}  // namespace

std::string write_file_durably(const std::string& path, const std::string& text) {
  if (const int fd = own_descriptor(path); fd >= 0) {
    return write_all(fd, text) ? "" : std::strerror(errno);
  }
  const mode_t new_file = 0666 & ~current_umask();
  struct stat target {};
  if (::stat(path.c_str(), &target) != 0) {
    if (errno != ENOENT) return std::strerror(errno);
    struct stat link {};
    if (::lstat(path.c_str(), &link) == 0) return "a symbolic link to a file that does not exist";
    return replace_atomically(path, text, new_file);
  }
  if (S_ISCHR(target.st_mode) || S_ISFIFO(target.st_mode)) return write_through(path, text);
  if (S_ISDIR(target.st_mode)) return "a folder";
  if (!S_ISREG(target.st_mode)) return "not a regular file, a device or a pipe";
  const mode_t kept = target.st_mode & 07777;  // a private report stays private
  struct stat link {};
  if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    // The link stays; the file it names is replaced, in that file's own folder. A link into
    // /proc names another process's descriptor: that file is not ours to replace.
    char* resolved = ::realpath(path.c_str(), nullptr);
    if (!resolved) return std::strerror(errno);
    const std::string file = resolved;
    std::free(resolved);
    if (file.rfind("/proc/", 0) == 0) return "a link to another process's open file";
    return replace_atomically(file, text, kept);
  }
  return replace_atomically(path, text, kept);
}

}  // namespace rematlab::files
