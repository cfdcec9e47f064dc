// The gradient check: one step from identical state and batch under a checkpoint policy and
// under `none`, compared parameter by parameter. Exact recomputation makes them identical.
#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "run/run_config.h"

namespace rematlab {

struct GradientCheckResult {
  bool identical = false;  // every gradient and the loss equal bit for bit
  double max_abs_diff = 0.0;
  double max_rel_diff = 0.0;
  double loss_diff = 0.0;
  int64_t params_compared = 0;
  double loss = 0.0;            // under the policy
  double reference_loss = 0.0;  // under none
  std::string worst_param;      // where max_abs_diff was found
};

// The check was stopped (GradientCheckOptions::cancel) before it finished.
struct GradientCheckCancelled {};

// Uses config.checkpoint (and config.offload) as the policy under test against none without
// offload; everything else is shared by both sides. On CUDA both sides run with deterministic
// algorithms (config.deterministic is forced on). `cancel`, read before each micro-batch of
// either side, stops it within one micro-batch: throws GradientCheckCancelled.
GradientCheckResult check_gradients(RunConfig config, const std::atomic<bool>* cancel = nullptr,
                                    std::optional<uint64_t> reference_seed = std::nullopt,
                                    int64_t at_step = 0);
// `reference_seed` (another seed for the `none` side: other weights, data and dropout) exists
// to check the check: it must then report DIFFERENT. `at_step` > 0 first trains each side
// through steps [0, at_step) under its own policy (train/trainer_replay.h) and compares step
// `at_step`: the check on a later step's state, as the advisor needs for a run that diverged
// there. Non-finite values count as equal where both sides have the same one (NaN included).

nlohmann::json to_json(const GradientCheckResult& result);

}  // namespace rematlab
