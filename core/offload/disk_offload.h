// Disk offload: saved segment inputs are written to files by a background thread after the
// segment's forward and read back one segment ahead in backward. Works on any device.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "offload/offload_store.h"

namespace rematlab {

struct DiskOffloadOptions {
  // Where the run's own directory is created; empty: the system temp directory.
  std::string parent;
  // Tests only: writes fail (like a full disk) once this many bytes were written. -1: never.
  int64_t fail_after_bytes = -1;
  // Tests only: this name instead of a random one, to plant something at it first.
  std::string name_for_tests;
  // Tests only: each write takes this much longer, as on a slow disk.
  std::chrono::milliseconds write_delay_for_tests{0};
};

// The run's own directory is created exclusively (mkdir, mode 0700: a path that already exists,
// a symlink included, is refused, never reused), holds an `owner` file naming this host and
// process and locked (flock) for the store's life, and every file in it is created exclusively
// without following links. Throws InvalidInput("--offload", …) when it cannot be created. The
// directory and everything in it are removed when the store is destroyed; a file as soon as it
// is read back, or when the graph that owned it is dropped (evaluation, cancel).
std::unique_ptr<OffloadStore> make_disk_offload_store(const DiskOffloadOptions& options);

// The directory a store created, for tests and messages.
std::string disk_offload_directory(const OffloadStore& store);

// Removes offload directories under `parent` left by processes that ended without removing them
// (a crash, kill -9). A directory is removed only when its owner lock is free and its owner ran
// on this host and is certainly gone (its pid is free, or now belongs to a process that started
// at another time); a live run's directory, another host's (shared storage), a symlink or
// anything not made by this program is left alone. Returns how many were removed.
int remove_stale_offload_directories(const std::string& parent);

}  // namespace rematlab
