// Disk offload: saved segment inputs are written to files by a background thread after the
// segment's forward and read back one segment ahead in backward. Works on any device.
#pragma once

#include <cstdint>
#include <string>
#include <memory>

#include "offload/offload_store.h"

namespace rematlab {

struct DiskOffloadOptions {
  // Where the run's own directory is created; empty: the system temp directory.
  std::string parent;
  // Tests only: writes fail (like a full disk) once this many bytes were written. -1: never.
  int64_t fail_after_bytes = -1;
};

// Throws InvalidInput("--offload", …) when the directory cannot be created. The directory and
// every file in it are removed when the store is destroyed; a file as soon as it is read back,
// or when the graph that owned it is dropped (evaluation, cancel).
std::unique_ptr<OffloadStore> make_disk_offload_store(const DiskOffloadOptions& options);

// The directory a store created, for tests and messages.
std::string disk_offload_directory(const OffloadStore& store);

// Removes offload directories under `parent` left by processes that no longer exist (a crash or
// kill -9). Returns how many were removed.
int remove_stale_offload_directories(const std::string& parent);

}  // namespace rematlab
