// Test helpers: a scratch directory removed with its contents, a file's bytes, and a port no
// process listens on now (for rendezvous variables that need a number up front).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "common/posix_files.h"

namespace rematlab::testing {

// A file's bytes, whatever they are (empty when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& what)
      : path_(files::join(files::temp_directory(),
                          "rematlab-" + what + "-" + std::to_string(::getpid()))) {
    files::remove_tree(path_);
    files::make_directories(path_);
  }
  ~ScratchDir() { files::remove_tree(path_); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return files::join(path_, name); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

}  // namespace rematlab::testing
