#include "advise/throughput_finding.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

namespace rematlab::advise {
namespace {

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

// Medians of one field over the timed steps (all steps when every one is a warm-up).
double timed_median(const std::vector<StepMetrics>& steps, double StepMetrics::*field) {
  std::vector<double> values;
  for (const StepMetrics& step : steps) {
    if (!step.warmup) values.push_back(step.*field);
  }
  if (values.empty()) {
    for (const StepMetrics& step : steps) values.push_back(step.*field);
  }
  return median(values);
}

// How much a run's step time varies on its own: the interquartile range of its timed steps'
// step_ms. Two runs whose phases differ by less than their spreads together are not told apart.
double step_spread(const std::vector<StepMetrics>& steps) {
  std::vector<double> times;
  for (const StepMetrics& step : steps) {
    if (!step.warmup) times.push_back(step.step_ms);
  }
  if (times.size() < 2) return 0.0;
  std::sort(times.begin(), times.end());
  const auto at = [&](double fraction) {
    return times[static_cast<std::size_t>(fraction * static_cast<double>(times.size() - 1) + 0.5)];
  };
  return at(0.75) - at(0.25);
}

double recompute_in_timeline(const std::vector<TimelinePoint>& timeline) {
  double total = 0.0;
  for (std::size_t i = 0; i + 1 < timeline.size(); ++i) {
    if (timeline[i].phase == MemoryPhase::kRecompute) {
      total += timeline[i + 1].time_ms - timeline[i].time_ms;
    }
  }
  return total;
}

// Room above a run's measured activation peak for the planner's prediction, a few percent high.
constexpr double kPlanHeadroom = 1.05;

// A plan can stand in for the run's policy: one process (the plans suggested here are made from
// one process's chain; over several ranks each rank's chain is measured in the run itself),
// nothing offloaded (the planner does not model offload), and a measured activation peak.
bool plannable(const RunRecord& run) {
  return run.config.world_size <= 1 && run.config.offload == "none" &&
         run.result.peak_activation_bytes > 0;
}

// What to do about a drop whose largest significant cost is `name` ("recompute",
// "offload waits", or empty when neither costs more than the noise).
Wording next_step_for(const RunRecord& run, const std::string& name, double added_recompute) {
  if (name == "recompute" && run.request.plan && !run.request.plan->chosen.empty()) {
    // Already the fastest plan its profile found for its budget: only more memory helps.
    return "this is the fastest plan found for " + run.request.plan->requested +
           ": a larger budget recomputes less (the Plan tab, or " +
           command("plan", setting("ladder", "6")) + " " + runs_settings() +
           ", shows what each budget buys)";
  } else if (name == "recompute" && plannable(run)) {
    // The memory this run used, as a budget, with room for the prediction's few percent (on the
    // smallest plans it predicts a little above what it then measures): the planner recomputes
    // only where it must to fit it.
    const std::string budget =
        std::to_string(static_cast<int64_t>(std::ceil(
            static_cast<double>(run.result.peak_activation_bytes) * kPlanHeadroom / 1048576.0))) +
        "MiB";
    return setting("checkpoint", "plan:" + budget) +
           " trains the fastest segment list that fits the activation memory this run used (" +
           command("plan", setting("budget", budget)) + " " + runs_settings() +
           " shows it first); or recompute less where memory allows, a larger K (" +
           setting("checkpoint", "every:K") + ")";
  } else if (name == "recompute" && run.config.pp > 1) {
    // The later stages hold fewer micro-batches in flight: they can recompute less than the first.
    // (A balanced run's record keeps the split it chose, which a stages: list goes beside.)
    return "recompute less where memory allows: a policy per stage (" +
           setting("checkpoint", "stages:P/P/…") +
           (run.config.virtual_stages > 1 ? ", one per model chunk" : "") +
           ") that recomputes less on the later stages, which hold fewer micro-batches; " +
           command("layout") + " " + runs_settings("degrees and --micro-batch") +
           ", without --checkpoint, chooses each stage's policy and predicts its peak";
  } else if (name == "recompute") {
    return "recompute less where memory allows: a larger K (" + setting("checkpoint", "every:K") +
           "); " + command("estimate") + " " + runs_settings("--preset and --batch") +
           " shows each K's peak";
  } else if (name == "offload waits") {
    return setting("offload", "none") +
           " where the memory allows it (on CUDA, host offload overlaps its copies with "
           "backward; disk offload waits on the disk)";
  } else {
    return "the added time is not recomputation (it adds " +
           format_ms(std::max(0.0, added_recompute)) +
           ", within the noise): rerun both with the same " + setting("threads") +
           " on a quiet machine (contention or noise)";
  }
}

}  // namespace

StepSplit split_step(const RunRecord& run, const std::vector<StepMetrics>& steps,
                     const std::vector<TimelinePoint>& timeline) {
  StepSplit split;
  split.forward = timed_median(steps, &StepMetrics::forward_ms);
  const double backward = timed_median(steps, &StepMetrics::backward_ms);
  split.offload_wait = timed_median(steps, &StepMetrics::offload_wait_ms);
  split.optimizer = timed_median(steps, &StepMetrics::optimizer_ms);
  if (!timeline.empty()) {
    split.recompute = recompute_in_timeline(timeline);
    split.recompute_source = "timeline";
  } else if (run.result.model_flops > 0.0) {
    // Model FLOPs are forward + backward = 3 × forward; hardware FLOPs add the recomputed part.
    const double forward_flops = run.result.model_flops / 3.0;
    split.recompute = split.forward *
                      std::max(0.0, run.result.hardware_flops - run.result.model_flops) /
                      forward_flops;
    split.recompute_source = "estimated from FLOPs";
  }
  split.recompute = std::min(split.recompute, backward);
  split.backward = std::max(0.0, backward - split.recompute - split.offload_wait);
  return split;
}

namespace {

// The noise: the runs' own step-time spreads together (against itself, the run's alone, at least
// 1 % of its step). A phase adds time only by more than this; less is not a verdict.
double noise_margin(const std::vector<StepMetrics>& steps,
                    const std::vector<StepMetrics>& reference_steps) {
  const double own = step_spread(steps);
  const double other = step_spread(reference_steps);
  const double step_ms = timed_median(steps, &StepMetrics::step_ms);
  return std::max(std::sqrt(own * own + other * other), 0.01 * step_ms);
}

// What a run's step is compared with: the `none` run of the same configuration when there is
// one, else the run itself less its recomputation and offload waits.
struct Reference {
  StepSplit split;
  double drop = 0.0;  // the run's throughput below the reference's, as a fraction
  std::string text;
};

Reference reference_for(const RunRecord& run, const StepSplit& split,
                        const std::optional<RunRecord>& none_run,
                        const std::vector<StepMetrics>& none_steps) {
  Reference reference;
  if (none_run && !none_steps.empty()) {
    reference.split = split_step(*none_run, none_steps, {});
    reference.split.recompute = 0.0;  // none recomputes nothing, whatever an estimate would say
    reference.drop = 1.0 - run.result.tokens_per_s / std::max(none_run->result.tokens_per_s, 1e-12);
    reference.text = "run #" + std::to_string(none_run->id) + " (none, measured)";
    return reference;
  }
  reference.split = split;
  reference.split.recompute = 0.0;
  reference.split.offload_wait = 0.0;
  const double step =
      split.forward + split.backward + split.recompute + split.offload_wait + split.optimizer;
  reference.drop = step > 0.0 ? (split.recompute + split.offload_wait) / step : 0.0;
  reference.text = "this run without its recomputation and offload waits (estimated)";
  return reference;
}

}  // namespace

std::optional<Finding> diagnose_throughput(const RunRecord& run,
                                           const std::vector<StepMetrics>& steps,
                                           const std::vector<TimelinePoint>& timeline,
                                           const std::optional<RunRecord>& none_run,
                                           const std::vector<StepMetrics>& none_steps) {
  if (steps.empty()) return std::nullopt;
  const StepSplit split = split_step(run, steps, timeline);
  const Reference compared = reference_for(run, split, none_run, none_steps);
  const StepSplit& reference = compared.split;
  const double drop = compared.drop;
  if (drop < kThroughputDropThreshold) return std::nullopt;

  const double margin = noise_margin(steps, none_run ? none_steps : std::vector<StepMetrics>{});

  struct Phase {
    const char* name;
    double run;
    double reference;
    double added() const { return run - reference; }
  };
  const std::array<Phase, 5> phases{{{"forward", split.forward, reference.forward},
                                     {"backward", split.backward, reference.backward},
                                     {"recompute", split.recompute, reference.recompute},
                                     {"offload waits", split.offload_wait, reference.offload_wait},
                                     {"optimizer", split.optimizer, reference.optimizer}}};
  const Phase* largest = &phases[0];
  for (const Phase& phase : phases) {
    if (phase.added() > largest->added()) largest = &phase;
  }
  const auto significant = [&](const char* name) {
    return std::any_of(phases.begin(), phases.end(), [&](const Phase& phase) {
      return std::string(phase.name) == name && phase.added() > margin;
    });
  };
  const double added_recompute = phases[2].added();

  Finding finding;
  finding.kind = FindingKind::kThroughputDropped;
  if (largest->added() <= margin) {
    finding.title = "Throughput dropped " + format_percent(drop) +
                    ": no phase adds more than the runs' own noise (" + format_ms(margin) + ")";
  } else {
    finding.title = "Throughput dropped " + format_percent(drop) + ": " + largest->name + " adds " +
                    format_ms(largest->added()) + " per step";
    // Recomputation that also costs more than the noise is named beside a larger phase: the
    // next step is about it, and the title must not read as if it cost nothing.
    if (largest != &phases[2] && significant("recompute")) {
      finding.title += ", recompute " + format_ms(added_recompute);
    }
  }
  finding.evidence.push_back({"compared with", compared.text});
  if (none_run) {
    char text[64];
    std::snprintf(text, sizeof text, "%.0f vs %.0f tokens/s", run.result.tokens_per_s,
                  none_run->result.tokens_per_s);
    finding.evidence.push_back({"tokens/s", text});
  }
  for (const Phase& phase : phases) {
    std::string value = format_ms(phase.run) + " (none: " + format_ms(phase.reference) + ")";
    if (std::string(phase.name) == "recompute") value += ", " + split.recompute_source;
    // Backward is measured with its recomputation and offload waits; here they are apart.
    const std::string label = std::string(phase.name) == "backward"
                                  ? "backward (recompute and offload waits apart)"
                                  : phase.name;
    finding.evidence.push_back({label, value});
  }
  finding.evidence.push_back(
      {"noise", "±" + format_ms(margin) + " (interquartile range of the timed steps' time" +
                    (none_run ? ", both runs together" : "") + "; a phase adding less is noise)"});
  // The advice follows the evidence: recomputation is named whenever it costs more than the
  // noise, offload waits next, and only when neither does is the time said to be something else.
  const std::string name = significant("recompute")       ? "recompute"
                           : significant("offload waits") ? "offload waits"
                                                          : "";
  finding.next_step = next_step_for(run, name, added_recompute);
  return finding;
}

}  // namespace rematlab::advise
