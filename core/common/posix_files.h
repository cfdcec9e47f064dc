// The few file-system operations the engine needs, on POSIX calls.
//
// Why not std::filesystem: LibTorch 2.11's libtorch.so exports its own copies of many
// std::filesystem functions (built with a newer libstdc++), which take precedence over the
// system's at load time; std::filesystem::remove_all then jumps to a null pointer. Keeping the
// engine off std::filesystem avoids depending on which copy wins.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rematlab::files {

std::string temp_directory();  // $TMPDIR or /tmp
std::string join(const std::string& directory, const std::string& name);
bool exists(const std::string& path);
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);  // after following links
// The size of a file in bytes; -1 when there is none.
int64_t file_size(const std::string& path);
// Creates `path` and missing parents; returns an empty string or the reason it failed.
std::string make_directories(const std::string& path);
// Names in `directory` (no "." or ".."); empty when it cannot be read.
std::vector<std::string> list(const std::string& directory);
// Removes a file; returns whether something was removed.
bool remove_file(const std::string& path);
// Removes `path` and everything below it; a missing path is fine.
void remove_tree(const std::string& path);

// Whether both paths name one existing file (links and different spellings included).
bool same_file(const std::string& a, const std::string& b);
// The folder `path` is in ("." for a bare name).
std::string parent_directory(const std::string& path);
// Whether this process may write to `path` (a file, or a folder to create files in).
bool writable(const std::string& path);
bool readable(const std::string& path);
bool is_valid_utf8(const std::string& text);

// A small text file (a configuration, a sweep spec) read whole through one descriptor: opened
// without blocking and checked with fstat on that descriptor, so a pipe, a device or a directory
// (or one swapped in after any earlier check) is refused rather than blocking the caller or read
// forever. `error` is empty when `text` holds the file, else the reason ("no such file", "not a
// regular file", "larger than 1 MiB", ...).
struct SmallFile {
  std::string text;
  std::string error;
};
SmallFile read_small_file(const std::string& path, int64_t largest_bytes);
// Whether a directory can be made in `folder`, found by making one (and removing it at once):
// the permission bits alone do not say (root ignores them; /proc refuses root too). Returns an
// empty string or the reason.
std::string probe_directory_creation(const std::string& folder);

// Whether another process holds a POSIX record lock on bytes [start, start + length) of `path`
// (from /proc/locks, without opening the file; this process's own locks never count).
bool locked_by_another_process(const std::string& path, int64_t start, int64_t length);

// Writes `text` to `path` so that, whatever happens, a regular file holds either its old content
// or the whole new one: an exclusively created temporary in the same folder, written, flushed to
// disk (fsync), renamed over the file, and the folder flushed so the rename survives a power cut
// too. A symbolic link stays and the file it names is replaced; a character device or a pipe
// (/dev/null, /dev/stdout, a FIFO) is written through, never replaced; anything else is refused.
// Returns an empty string or the reason it failed; the temporary never remains.
std::string write_file_durably(const std::string& path, const std::string& text);

}  // namespace rematlab::files
