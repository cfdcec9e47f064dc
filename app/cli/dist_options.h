// The data-parallel flags of `run`: local ranks to start, what to shard, the gradient bucket size
// and how long a rank waits for the others before it gives up.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <optional>
#include <string>

#include "run/run_config.h"

namespace rematlab::cli {

class DistOptions {
 public:
  void add_to(CLI::App& command);
  // Sets config's shard, bucket size and (with --nproc) world size, and validates it. Throws
  // InvalidInput naming the flag.
  void apply(RunConfig& config) const;

  bool nproc_given() const { return nproc_.has_value(); }
  int nproc() const { return nproc_.value_or(1); }
  std::chrono::milliseconds timeout() const;

 private:
  std::optional<int> nproc_;
  std::optional<int64_t> tp_;
  std::optional<int64_t> pp_;
  std::optional<int64_t> ep_;
  std::optional<int64_t> virtual_stages_;
  std::string pp_split_;
  bool sequence_parallel_ = false;
  std::string shard_ = "none";
  std::string bucket_size_;
  std::optional<double> timeout_s_;
};

}  // namespace rematlab::cli
