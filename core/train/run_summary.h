// The result of a run: the design's `run --json` contract.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memory/memory_tracker.h"
#include "train/run_config.h"
#include "train/step_metrics.h"

namespace rematlab {

enum class RunStatus { kOk, kOom, kCancelled, kDiverged };
std::string to_string(RunStatus status);

struct RunSummary {
  RunStatus status = RunStatus::kOk;
  std::string message;  // why, when status is not ok
  RunConfig config;
  int64_t params = 0;
  int64_t steps_completed = 0;
  double first_loss = 0.0;
  double final_loss = 0.0;
  // Medians over timed (non-warm-up) steps.
  double tokens_per_s = 0.0;
  double step_ms = 0.0;
  double forward_ms = 0.0;
  double backward_ms = 0.0;
  double offload_wait_ms = 0.0;
  // Maxima over timed steps.
  int64_t peak_bytes = 0;
  int64_t baseline_bytes = 0;
  int64_t peak_activation_bytes = 0;
  int64_t saved_activation_bytes = 0;
  int64_t offloaded_peak_bytes = 0;
  int64_t rss_peak_bytes = 0;
  int64_t reserved_bytes = 0;     // CUDA: caching allocator; 0 on CPU
  int64_t device_used_bytes = 0;  // CUDA: the device's used memory (nvidia-smi); 0 on CPU
  // Compute per optimizer step (docs/estimates.md): model and hardware FLOPs (the latter with
  // recomputation), model FLOP/s at the median step time, the peak it is measured against, and
  // the utilisations MFU = achieved / peak and HFU = hardware FLOP/s / peak.
  double model_flops = 0.0;
  double hardware_flops = 0.0;
  double achieved_flops = 0.0;
  double peak_flops = 0.0;
  double mfu = 0.0;
  double hfu = 0.0;
  std::vector<StepMetrics> steps;
  std::vector<TimelinePoint> timeline;  // one step, when asked for
  int64_t timeline_step = -1;
  std::optional<int64_t> run_id;  // set by the runs database

  // Fills the medians and maxima from `steps`.
  void summarize();
};

// The design's `run --json` object, plus `saved_activation_bytes`, `offload_wait_ms`,
// `status_message` (when not ok), `timeline` (when recorded) and the FLOPs and utilisation fields.
nlohmann::json to_json(const RunSummary& summary);
nlohmann::json to_json(const StepMetrics& step);

}  // namespace rematlab
