#include "advise/advisor.h"

#include "advise/chain_walk.h"
#include "advise/divergence.h"
#include "advise/ending_finding.h"
#include "advise/memory_finding.h"
#include "advise/reference_run.h"
#include "advise/throughput_finding.h"
#include "common/errors.h"
#include "run/run_fields.h"
#include "train/trainer_replay.h"

namespace rematlab::advise {
namespace {

// The number of parameter names a finding lists before "and N more".
constexpr std::size_t kNamesShown = 8;

Finding missing_gradients_finding(const ChainWalk& walk, const std::string& which_step) {
  Finding finding;
  finding.kind = FindingKind::kMissingGradients;
  const std::size_t missing = walk.params_without_gradient.size();
  finding.title = std::to_string(missing) + " of " + std::to_string(walk.params_total) +
                  " parameters received no gradient";
  std::string names;
  for (std::size_t i = 0; i < missing && i < kNamesShown; ++i) {
    names += (i ? ", " : "") + walk.params_without_gradient[i];
  }
  if (missing > kNamesShown) names += " and " + std::to_string(missing - kNamesShown) + " more";
  finding.evidence = {{"without gradient", names}, {"step replayed", which_step}};
  finding.next_step =
      "find the branch that does not reach the loss (a detached tensor, an unused module): these "
      "weights never train, and AdamW's weight decay still shrinks them";
  return finding;
}

// One step of the run's configuration from its first state, walked for gradients that never
// arrive. Replayed rather than recorded during training: it costs a step here, nothing there.
std::optional<ChainWalk> replay_first_step(const RunRecord& run, std::vector<Wording>& notes) {
  if (run.config.world_size > 1) {
    notes.push_back("missing gradients: a run on several ranks is not replayed (one process here)");
    return std::nullopt;
  }
  const RunConfig config = replay_config(run.config);
  try {
    Trainer trainer(config);
    return walk_chain(trainer);
  } catch (const InvalidInput& error) {
    notes.push_back("missing gradients: cannot replay on this machine: " + error.words());
    return std::nullopt;
  }
}

// Recorded settings this build could not read leave their defaults in the run's config: a
// replay, an estimate or a `none` reference made from it would advise on another configuration
// than the one that ran. Said instead, and nothing is built from it.
std::optional<Wording> unread_config_note(const RunRecord& run) {
  if (run.unread_config_fields.empty()) return std::nullopt;
  return Wording(
      "not diagnosed: the run holds settings not known to this version (a newer "
      "RematLab or a hand edit): its " +
      unread_fields_text(run.unread_config_fields) +
      " could not be read, and advice built from their defaults would be about "
      "another configuration than the one that ran");
}

}  // namespace

Diagnosis diagnose_run(RunStore& store, int64_t run_id, const AdviseOptions& options) {
  const RunRecord run = store.run(run_id);
  Diagnosis diagnosis;
  diagnosis.run_id = run.id;
  diagnosis.run_label = run.label();
  if (auto note = unread_config_note(run)) {
    diagnosis.notes.push_back(std::move(*note));
    return diagnosis;
  }
  const std::vector<StepMetrics> steps = store.steps(run_id);

  std::optional<ChainWalk> walk;
  std::string walked_step = "0 (the first)";
  if (auto finding = diagnose_divergence(run, steps, options, diagnosis.notes, walk)) {
    if (walk) walked_step = std::to_string(*first_nonfinite_step(steps)) + " (the diverged one)";
    diagnosis.findings.push_back(std::move(*finding));
  }
  if (auto finding = diagnose_ending(run, steps)) diagnosis.findings.push_back(std::move(*finding));

  if (reduces_memory(run.config)) {
    if (run.status == RunStatus::kOk && run.has_result) {
      const std::optional<RunRecord> none_run = find_none_run(run, store.runs());
      if (none_run) {
        const std::string differs = describe_differences(run.config, none_run->config);
        diagnosis.notes.push_back(
            "memory and throughput: compared with run #" + std::to_string(none_run->id) +
            " (none)" +
            (differs.empty() ? ", the same configuration in every setting"
                             : ", which also differs in " + differs +
                                   ": settings that change neither a step's memory nor its time"));
      }
      if (const auto why = unestimable(run.config)) {
        diagnosis.notes.push_back("memory: not checked, the estimator cannot reproduce this run (" +
                                  *why + ")");
      } else if (auto finding = diagnose_memory(run, steps, none_run, diagnosis.notes)) {
        diagnosis.findings.push_back(std::move(*finding));
      } else {
        diagnosis.checked.push_back("memory: the peak is at least " +
                                    format_percent(kMemoryReductionThreshold) + " below none's");
      }
      const std::vector<StepMetrics> none_steps =
          none_run ? store.steps(none_run->id) : std::vector<StepMetrics>{};
      if (auto finding =
              diagnose_throughput(run, steps, store.timeline(run_id), none_run, none_steps)) {
        diagnosis.findings.push_back(std::move(*finding));
      } else {
        diagnosis.checked.push_back("throughput: less than " +
                                    format_percent(kThroughputDropThreshold) + " below " +
                                    (none_run ? "none's" : "the run's own without recomputation"));
      }
    } else {
      diagnosis.notes.push_back("memory and throughput: the run did not finish (" +
                                to_string(run.status) + "), so it has no medians to judge");
    }
  }

  if (!walk && options.replay) walk = replay_first_step(run, diagnosis.notes);
  if (!options.replay) {
    diagnosis.notes.push_back(
        "missing gradients: looked for only by a replay, and none was asked for");
  } else if (walk && !walk->params_without_gradient.empty()) {
    diagnosis.findings.push_back(missing_gradients_finding(*walk, walked_step));
  } else if (walk) {
    diagnosis.checked.push_back("missing gradients: step " + walked_step + " replayed, all " +
                                std::to_string(walk->params_total) +
                                " parameters that train received a gradient");
  }
  return diagnosis;
}

}  // namespace rematlab::advise
