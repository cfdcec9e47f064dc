#include "advise/ending_finding.h"

#include <algorithm>
#include <cmath>

#include "checkpoint/checkpoint_policy.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "estimate/estimate.h"
#include "layout/run_layout.h"
#include "run/run_summary.h"

namespace rematlab::advise {
namespace {

constexpr double kMiB = 1048576.0;

// A budget as `--budget` takes it, rounded up to whole MiB: what is given fits what was asked.
std::string budget_flag(int64_t bytes) {
  return std::to_string(static_cast<int64_t>(std::ceil(static_cast<double>(bytes) / kMiB))) + "MiB";
}

// A pipeline's fullest stage by the layout planner: what it needs at micro-batch `batch`, and the
// largest micro-batch up to that one that fits `budget` (0: not even one), by bisection (the
// stages' memory rises with the micro-batch).
std::optional<estimate::DeviceFit> stage_fit(const RunConfig& config, int64_t batch,
                                             int64_t budget) {
  try {
    RunConfig sized = config;
    // A plan is estimated as what each stage can fall back to, every:1.
    const std::string policy =
        CheckpointPolicy::parse(config.checkpoint).is_plan() ? "every:1" : "";
    auto needs = [&](int64_t micro_batch) {
      sized.batch = micro_batch;
      return layout::evaluate_run(sized, policy).memory.total();
    };
    estimate::DeviceFit fit;
    fit.memory_bytes = budget;
    const int64_t asked = std::max<int64_t>(1, batch);
    fit.needed_bytes = needs(asked);
    fit.fits = fit.needed_bytes <= budget;
    int64_t fitting = fit.fits ? asked : 0;  // fits (0: nothing yet known to)
    int64_t too_large = fit.fits ? asked + 1 : asked;
    while (too_large - fitting > 1) {
      const int64_t middle = fitting + (too_large - fitting) / 2;
      (needs(middle) <= budget ? fitting : too_large) = middle;
    }
    fit.max_batch = fitting;
    return fit;
  } catch (const InvalidInput&) {
    return std::nullopt;
  }
}

// What the estimator says a step of `config` needs at its batch, and the largest batch that fits
// `budget` (a plan is estimated as what it can fall back to, every:1); nothing when the
// configuration cannot be estimated. Split over tensor ranks, the figures are one rank's; over
// expert ranks, the fullest rank's at the steps' rank load; over pipeline stages, the fullest
// stage's.
std::optional<estimate::DeviceFit> estimated_fit(const RunConfig& config,
                                                 const std::vector<StepMetrics>& steps,
                                                 int64_t batch, int64_t budget) {
  if (config.pp > 1) return stage_fit(config, batch, budget);
  try {
    estimate::EstimateRequest request;
    request.arch = estimate::from_model_config(config.model);
    const RecordedExpertLoads loads = recorded_expert_loads(config, steps);
    request.arch->expert_rank_load = loads.rank;
    request.arch->expert_block_load = loads.block;
    request.arch->expert_load = loads.expert;
    request.precision = config.precision;
    request.checkpoint =
        CheckpointPolicy::parse(config.checkpoint).is_plan() ? "every:1" : config.checkpoint;
    request.offload = config.offload != "none";
    request.batch = std::max<int64_t>(1, batch);
    request.device_memories = {budget};
    request.world_size = config.world_size;
    request.shard = config.shard;
    request.expert_ranks = config.ep;
    request.layout = {config.tp, config.sequence_parallel};
    const estimate::Estimate made = estimate::make_estimate(request);
    if (made.fits.empty()) return std::nullopt;
    return made.fits.front();
  } catch (const InvalidInput&) {
    return std::nullopt;
  }
}

void out_of_memory(const RunRecord& run, const std::vector<StepMetrics>& steps, Finding& finding) {
  const RunConfig& config = run.config;
  if (run.request.plan && run.request.plan->chosen.empty()) {
    const int64_t smallest = run.request.plan->smallest_feasible_bytes;
    finding.evidence.push_back({"asked", run.request.plan->requested});
    finding.evidence.push_back({"smallest budget a plan fits", format_bytes(smallest)});
    finding.next_step = setting("checkpoint", "plan:" + budget_flag(smallest)) +
                        " (the least activation memory any plan of this model and batch fits), "
                        "or a smaller " +
                        setting("batch");
    return;
  }
  if (run.request.max_batch && config.batch == 0) {
    const int64_t budget = run.request.max_batch->budget_bytes;
    finding.evidence.push_back({"budget", format_bytes(budget)});
    const auto fit = estimated_fit(config, steps, 1, budget);
    if (fit)
      finding.evidence.push_back({"batch 1 needs (estimated)", format_bytes(fit->needed_bytes)});
    const Wording more_recomputation =
        "a policy that recomputes more (" + setting("checkpoint", "every:1") + ")";
    finding.next_step = fit ? setting("budget", budget_flag(fit->needed_bytes)) +
                                  " or more (what batch 1 needs, estimated), or " +
                                  more_recomputation
                            : "a larger " + setting("budget") + ", or " + more_recomputation;
    return;
  }
  const int64_t budget = config.budget_bytes;
  if (budget <= 0) {  // the device itself ran out
    finding.evidence.push_back({"device", config.device});
    finding.next_step = "a smaller " + setting("batch") + ", or a policy that recomputes more (" +
                        setting("checkpoint", "every:1") + "); " + command("estimate") + " " +
                        runs_settings() + " shows what fits";
    return;
  }
  // The step that went over, as measured, and the estimator's figures for this batch and budget.
  // The steps are rank 0's; ranks that hold different parts (expert ranks, pipeline stages)
  // peak apart, and the fullest one is what the budget must hold.
  int64_t measured = 0;
  for (const StepMetrics& step : steps) measured = std::max(measured, step.peak_bytes);
  for (const RankResult& rank : run.result.ranks) measured = std::max(measured, rank.peak_bytes);
  finding.evidence.push_back({"budget", format_bytes(budget)});
  if (measured > 0) finding.evidence.push_back({"peak measured", format_bytes(measured)});
  const auto fit = estimated_fit(config, steps, config.batch, budget);
  int64_t needed = measured;
  if (fit) {
    finding.evidence.push_back(
        {"a step at batch " + std::to_string(config.batch) + " needs (estimated)",
         format_bytes(fit->needed_bytes)});
    // The first steps miss the optimizer's moments: the larger figure is what a whole run needs.
    needed = std::max(needed, fit->needed_bytes);
  }
  Wording step = setting("budget", budget_flag(needed)) + " (the smallest that fits batch " +
                 std::to_string(config.batch) + ")";
  if (fit && fit->max_batch && *fit->max_batch > 0 && *fit->max_batch < config.batch) {
    finding.evidence.push_back(
        {"largest batch under the budget (estimated)", std::to_string(*fit->max_batch)});
    // max-batch searches one process: it measures what a run on several ranks fits only there.
    step += ", or " + setting("batch", std::to_string(*fit->max_batch)) +
            " (the largest the estimator fits under " + format_bytes(budget) +
            (config.world_size == 1 ? "; " + command("max-batch") + " measures it)" : Wording(")"));
  } else if (fit && (!fit->max_batch || *fit->max_batch == 0)) {
    step += "; not even batch 1 fits the budget by the estimate";
  }
  finding.next_step = step;
}

}  // namespace

std::optional<Finding> diagnose_ending(const RunRecord& run,
                                       const std::vector<StepMetrics>& steps) {
  if (run.status != RunStatus::kOom && run.status != RunStatus::kFailed &&
      run.status != RunStatus::kInterrupted) {
    return std::nullopt;
  }
  Finding finding;
  finding.kind = FindingKind::kDidNotFinish;
  finding.title = "Run #" + std::to_string(run.id) + " ended " + to_string(run.status) +
                  (run.message.empty() ? "" : ": " + run.message);
  finding.evidence.push_back({"steps recorded", std::to_string(run.steps_recorded) + " of " +
                                                    std::to_string(run.config.steps)});
  if (run.status == RunStatus::kOom) {
    out_of_memory(run, steps, finding);
  } else if (run.status == RunStatus::kInterrupted) {
    finding.next_step =
        "the process that trained it ended without finishing it (killed, or the machine "
        "stopped): train it again";
  } else {
    finding.next_step = "fix what the reason names, then train it again";
  }
  return finding;
}

}  // namespace rematlab::advise
