// The loads a mixture of experts' activations are sized at, as `estimate` and `layout` take
// them from a run (`run` prints them): the fullest expert rank's over a step and over its
// busiest block, and the busiest expert's.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>

#include "estimate/architecture.h"

namespace rematlab::cli {

class ExpertLoadOptions {
 public:
  // `rank_load_sizes`: what the rank load sizes besides the activations (the planner's
  // all-to-all and compute).
  void add_to(CLI::App& command, const char* rank_load_sizes);
  // Sets arch's loads where given (their ranges are checked with --ep by estimate and layout).
  // Throws InvalidInput naming the flag when there is no shape or it has no experts.
  void apply(estimate::Architecture* arch) const;

 private:
  std::optional<double> rank_load_;
  std::optional<double> block_load_;
  std::optional<double> expert_load_;
};

}  // namespace rematlab::cli
