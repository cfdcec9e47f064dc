#include "advise/divergence.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

#include "advise/reference_run.h"
#include "common/errors.h"
#include "train/gradient_check.h"
#include "train/trainer_replay.h"

namespace rematlab::advise {
namespace {

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", value);
  return text;
}

bool same_loss(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// What the walk names: the piece, and how it shows.
void describe_culprit(const ChainWalk& walk, Finding& finding) {
  if (const auto forward = walk.first_nonfinite_output()) {
    const PieceCheck& piece = walk.pieces[*forward];
    if (piece.nonfinite_params > 0) {
      finding.title += ": " + piece.name + "'s weights were already non-finite";
      finding.evidence.push_back({"non-finite weights of " + piece.name,
                                  std::to_string(piece.nonfinite_params) + " values"});
    } else {
      finding.title += ": first non-finite output in " + piece.name + " (forward)";
      finding.evidence.push_back({"non-finite outputs of " + piece.name,
                                  std::to_string(piece.nonfinite_outputs) + " values"});
      if (*forward > 0) {
        finding.evidence.push_back(
            {"largest |input| of " + piece.name, number(walk.pieces[*forward - 1].max_abs_output)});
      }
    }
    finding.evidence.push_back({"largest |weight| of " + piece.name, number(piece.max_abs_param)});
    return;
  }
  if (const auto backward = walk.first_nonfinite_backward()) {
    const PieceCheck& piece = walk.pieces[*backward];
    finding.title += ": first non-finite gradient from " + piece.name + " (backward)";
    finding.evidence.push_back(
        {"non-finite gradient", piece.nonfinite_param_grad.empty()
                                    ? "of " + piece.name + "'s input"
                                    : "of parameter " + piece.nonfinite_param_grad});
    finding.evidence.push_back({"largest |output| of " + piece.name, number(piece.max_abs_output)});
    finding.evidence.push_back({"largest |weight| of " + piece.name, number(piece.max_abs_param)});
    return;
  }
  finding.title += ": the replayed step is finite everywhere";
}

}  // namespace

std::optional<int64_t> first_nonfinite_step(const std::vector<StepMetrics>& steps) {
  for (const StepMetrics& step : steps) {
    if (step.skipped) continue;
    if (!std::isfinite(step.loss) || !std::isfinite(step.grad_norm)) return step.step;
  }
  return std::nullopt;
}

namespace {

// What the stored steps say: where the run diverged, and a lower learning rate to try.
Finding stored_evidence(const RunRecord& run, const std::vector<StepMetrics>& steps, int64_t bad) {
  const auto found = std::find_if(steps.begin(), steps.end(),
                                  [&](const StepMetrics& stored) { return stored.step == bad; });
  const StepMetrics& step = *found;
  Finding finding;
  finding.kind = FindingKind::kDiverged;
  finding.title = "Loss or gradients became non-finite at step " + std::to_string(bad);
  finding.evidence.push_back(
      {"first non-finite step", std::to_string(bad) + " of " + std::to_string(run.config.steps)});
  finding.evidence.push_back({"its loss", number(step.loss)});
  finding.evidence.push_back({"its gradient norm", number(step.grad_norm)});
  if (found != steps.begin() && std::prev(found)->step == bad - 1) {
    finding.evidence.push_back({"loss one step before", number(std::prev(found)->loss)});
  }
  finding.evidence.push_back({"learning rate", number(run.config.lr)});

  char lower_lr[32];
  std::snprintf(lower_lr, sizeof lower_lr, "%g", run.config.lr / 10.0);
  finding.next_step = "train again with a lower learning rate (" + setting("lr", lower_lr);
  if (run.config.grad_clip <= 0.0) finding.next_step += " " + setting("grad_clip", "1");
  if (run.config.precision == Precision::kFp16) {
    finding.next_step += " " + setting("precision", "bf16");
  }
  finding.next_step += ")";
  return finding;
}

// Replays the run up to step `bad` and walks that step sublayer by sublayer, naming the first
// that went non-finite. False, with a note, when the replay could not be made.
bool replay_and_walk(const RunConfig& config, const std::vector<StepMetrics>& steps, int64_t bad,
                     const AdviseOptions& options, std::vector<Wording>& notes,
                     std::optional<ChainWalk>& walk, Finding& finding) {
  try {
    Trainer trainer(config);
    const std::vector<double> losses = replay_until(trainer, bad, options.cancel);
    for (std::size_t i = 0; i < losses.size() && i < steps.size(); ++i) {
      // Steps are stored from 0 in order; a gap would make the comparison meaningless.
      if (steps[i].step != static_cast<int64_t>(i)) break;
      if (!same_loss(losses[i], steps[i].loss)) {
        notes.push_back("the replay's loss at step " + std::to_string(i) + " is " +
                        number(losses[i]) + ", the stored one " + number(steps[i].loss) +
                        ": the sublayer named is the replay's");
        break;
      }
    }
    walk = walk_chain(trainer);
    finding.evidence.push_back({"replayed loss at that step", number(walk->loss)});
    describe_culprit(*walk, finding);
    return true;
  } catch (const ReplayCancelled&) {
    notes.push_back("divergence: replay cancelled");
  } catch (const InvalidInput& error) {
    notes.push_back("divergence: cannot replay on this machine: " + error.words());
  }
  return false;
}

// Whether recomputation changed step `bad`: its gradients under the run's policy against none's.
void check_recomputation(const RunRecord& run, const RunConfig& config, int64_t bad,
                         const AdviseOptions& options, std::vector<Wording>& notes,
                         Finding& finding) {
  try {
    const GradientCheckResult check = check_gradients(config, options.cancel, std::nullopt, bad);
    if (check.identical) {
      finding.evidence.push_back(
          {"recomputation", "innocent: step " + std::to_string(bad) + " under " +
                                run.config.checkpoint + " equals none bit for bit (" +
                                std::to_string(check.params_compared) + " gradients)"});
    } else {
      finding.evidence.push_back(
          {"recomputation", "NOT innocent: step " + std::to_string(bad) + " under " +
                                run.config.checkpoint + " differs from none (max |diff| " +
                                number(check.max_abs_diff) + " in " + check.worst_param + ")"});
      finding.next_step = command("check", setting("checkpoint", run.config.checkpoint) + " " +
                                               setting("at_step", std::to_string(bad))) +
                          " " + runs_settings("flags") + " shows the difference; train with " +
                          setting("checkpoint", "none") + " until it is fixed";
    }
  } catch (const GradientCheckCancelled&) {
    notes.push_back("divergence: exactness check cancelled");
  }
}

}  // namespace

std::optional<Finding> diagnose_divergence(const RunRecord& run,
                                           const std::vector<StepMetrics>& steps,
                                           const AdviseOptions& options,
                                           std::vector<Wording>& notes,
                                           std::optional<ChainWalk>& walk) {
  const std::optional<int64_t> bad = first_nonfinite_step(steps);
  if (!bad) {
    if (run.status == RunStatus::kDiverged) {
      notes.push_back(
          "the run is marked diverged but no stored step has a non-finite loss or "
          "gradient norm: nothing to replay");
    }
    return std::nullopt;
  }
  Finding finding = stored_evidence(run, steps, *bad);
  if (!options.replay) {
    notes.push_back(
        "divergence: not replayed, so the first non-finite sublayer "
        "and the exactness check are unknown");
    return finding;
  }
  if (run.config.world_size > 1) {
    notes.push_back("divergence: a run on several ranks is not replayed (one process here)");
    return finding;
  }
  const RunConfig config = replay_config(run.config);
  if (!replay_and_walk(config, steps, *bad, options, notes, walk, finding)) return finding;
  if (!reduces_memory(run.config)) {
    finding.evidence.push_back({"recomputation", "none in this run (policy none): not involved"});
    return finding;
  }
  check_recomputation(run, config, *bad, options, notes, finding);
  return finding;
}

}  // namespace rematlab::advise
