#include "train/trainer_replay.h"

namespace rematlab {

RunConfig replay_config(const RunConfig& run) {
  RunConfig config = run;
  config.timeline = false;
  config.budget_bytes = 0;
  if (parse_offload(config.offload).kind == OffloadKind::kDisk) config.offload = "disk";
  return config;
}

std::vector<double> replay_until(Trainer& trainer, int64_t step, const std::atomic<bool>* cancel) {
  std::vector<double> losses;
  if (step <= 0) return losses;
  // run() checks its cancel flag before every micro-batch: raised after step `step` - 1 it
  // stops before that step draws any data or random numbers.
  std::atomic<bool> stop{false};
  TrainerCallbacks callbacks;
  callbacks.cancel = &stop;
  callbacks.report_utilisation = false;
  callbacks.on_step = [&](const StepMetrics& metrics) {
    losses.push_back(metrics.loss);
    if (metrics.step + 1 >= step) stop = true;
  };
  if (cancel) {
    // The caller's flag is only read between steps here; a step is the unit of a replay.
    auto forward = callbacks.on_step;
    callbacks.on_step = [forward, cancel, &stop](const StepMetrics& metrics) {
      forward(metrics);
      if (cancel->load()) stop = true;
    };
  }
  trainer.run(callbacks);
  if (cancel && cancel->load() && static_cast<int64_t>(losses.size()) < step) {
    throw ReplayCancelled{};
  }
  return losses;
}

}  // namespace rematlab
