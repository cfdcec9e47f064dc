#include "common/posix_files.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rematlab::files {

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

bool is_directory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::string make_directories(const std::string& path) {
  if (path.empty()) return "empty path";
  for (std::size_t slash = path.find('/', 1); ; slash = path.find('/', slash + 1)) {
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

}  // namespace rematlab::files
