// The result of a run: what it measured (RunResult, the part the runs database keeps), how it
// ended, and every step (RunSummary, what the trainer returns).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "memory/timeline_point.h"
#include "run/planned_policy.h"
#include "run/rank_result.h"
#include "run/run_config.h"
#include "run/run_status.h"
#include "run/step_metrics.h"

namespace rematlab {

// What a run measured. Medians and maxima are over its timed (non-warm-up) steps.
struct RunResult {
  int64_t params = 0;
  int64_t steps_completed = 0;
  double first_loss = 0.0;
  double final_loss = 0.0;
  // Medians over timed steps.
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
  // Where peak_flops came from, e.g. "database: measured 2026-11-30T10:00:00Z, best of 7".
  std::string peak_flops_source;
  // Data parallel (0 alone), medians over timed steps: collectives in flight, the time the
  // training thread was blocked on them, and the difference, hidden behind computation.
  double comm_ms = 0.0;
  double comm_wait_ms = 0.0;
  double comm_hidden_ms = 0.0;
  // A pipeline stage (0 otherwise), medians within comm_wait_ms: its bubble and its transfers
  // (step_metrics.h).
  double bubble_ms = 0.0;
  double transfer_ms = 0.0;
  // Expert parallelism (0 otherwise), the median within comm_wait_ms: its all-to-all exchanges.
  double dispatch_ms = 0.0;
  // Fully sharded parameters (0 otherwise), the most in one timed step: all-gathers of parameter
  // units, and those recomputation added.
  int64_t parameter_gathers = 0;
  int64_t recompute_gathers = 0;
  // Data parallel: every rank's figures, in rank order (empty for a run of one process).
  std::vector<RankResult> ranks;

  // A pipeline's memory is its fullest stage's (expert parallelism's its fullest rank's): the peak,
  // the activations and the baseline (its model states) all from the rank with the highest peak
  // (each figure's maximum apart could mix stages). What ranks do not report (saved activations,
  // RSS, the allocator's reserved and the device's used bytes) and the steps stay rank 0's.
  void take_memory_of_fullest_rank();
};

// How a result field reads best: the CLI and the window format values by it.
enum class ResultUnit { kCount, kBytes, kMilliseconds, kTokensPerSecond, kLoss, kFlops, kFraction };

// Every numeric RunResult field once, by the name it has in the database, the CSV, the JSON and
// the comparison: the single list all of them go through.
struct ResultField {
  const char* name;
  std::variant<int64_t RunResult::*, double RunResult::*> member;
  ResultUnit unit;
  bool higher_is_better = false;  // for the comparison's verdicts (tokens/s: yes; bytes: no)
};
const std::vector<ResultField>& result_fields();
double result_value(const RunResult& result, const ResultField& field);
const ResultField* find_result_field(const std::string& name);

struct RunSummary : RunResult {
  RunStatus status = RunStatus::kOk;
  std::string message;  // why, when status is not ok
  RunConfig config;     // what it trained with (a max-batch run: the batch found)
  std::vector<StepMetrics> steps;
  std::vector<TimelinePoint> timeline;  // one step, when asked for
  int64_t timeline_step = -1;
  std::optional<int64_t> run_id;  // set by the runs database
  // `--checkpoint plan:BUDGET`: what was planned (config.checkpoint holds the list it chose).
  std::optional<PlannedPolicy> planned;

  // Fills the medians and maxima from `steps`.
  void summarize();
};

// The stored form: every result field (non-finite values as "nan"/"inf"), plus the source of
// the peak and, for a data-parallel run, "ranks". Reading ignores unknown keys and reads the
// schema-3 key "steps" as steps_completed.
nlohmann::json to_json(const RunResult& result);
RunResult run_result_from_json(const nlohmann::json& json);

// The design's `run --json` object: status, the config it trained with, every result field,
// `steps` (= steps completed), `status_message` (when not ok), `timeline` (when recorded),
// `plan` (what a plan:BUDGET run planned, beside what it measured).
nlohmann::json to_json(const RunSummary& summary);
nlohmann::json to_json(const StepMetrics& step);

// The largest of `steps`' recorded (not NaN) values of `figure`; NaN when none recorded one.
double most_recorded(const std::vector<StepMetrics>& steps, double StepMetrics::*figure);
// A mixture of experts' loads as `steps` recorded them, the largest over the steps: under expert
// parallelism the fullest rank's over a step (its experts' activations hold that many times a
// balanced rank's) and over its busiest block (at least the step's); the busiest expert's.
// 1 where none was recorded, or for a value no run records (edited by hand).
struct RecordedExpertLoads {
  double rank = 1.0;
  double block = 1.0;
  double expert = 1.0;
};
RecordedExpertLoads recorded_expert_loads(const RunConfig& config,
                                          const std::vector<StepMetrics>& steps);

}  // namespace rematlab
