#include "train/gradient_check.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/errors.h"
#include "runtime/device.h"
#include "train/trainer.h"
#include "train/trainer_replay.h"

namespace rematlab {
namespace {

struct OneStep {
  double loss = 0.0;
  std::vector<std::pair<std::string, torch::Tensor>> gradients;
};

// Builds a fresh trainer (which seeds and initialises the model) and takes one step's
// gradients, so both sides start from the same weights, batch and RNG state.
OneStep gradients_under(RunConfig config, const std::string& policy, const std::string& offload,
                        const std::atomic<bool>* cancel, int64_t at_step) {
  config.checkpoint = policy;
  config.offload = offload;
  Trainer trainer(config, nullptr, cancel);
  OneStep result;
  try {
    replay_until(trainer, at_step, cancel);
  } catch (const ReplayCancelled&) {
    throw GradientCheckCancelled{};
  }
  const double progress = static_cast<double>(at_step) / static_cast<double>(config.steps);
  const std::optional<double> loss = trainer.accumulate_gradients(
      trainer.policy().plan_for(config.model.layers, progress, config.pp_split), cancel);
  if (!loss) throw GradientCheckCancelled{};
  result.loss = *loss;
  for (const auto& item : trainer.model()->named_parameters()) {
    if (!item.value().requires_grad()) continue;  // frozen: no gradient to compare
    result.gradients.emplace_back(item.key(), item.value().grad().detach().to(torch::kCPU).clone());
  }
  return result;
}

// Equal element by element, where the same NaN or infinity on both sides counts as equal: a step
// that diverged identically under both policies is still identical.
torch::Tensor same_elements(const torch::Tensor& a, const torch::Tensor& b) {
  return (a == b) | (a.isnan() & b.isnan());
}

bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

}  // namespace

GradientCheckResult check_gradients(RunConfig config, const std::atomic<bool>* cancel,
                                    std::optional<uint64_t> reference_seed, int64_t at_step) {
  if (at_step < 0 || at_step >= config.steps) {
    throw InvalidInput("--at-step", "must lie in [0, steps)");
  }
  // On CUDA some kernels (atomics in reductions, cuBLAS split-K) may differ from run to run;
  // bit-for-bit is only a fair test with deterministic algorithms.
  if (parse_device(config.device).is_cuda()) config.deterministic = true;
  const OneStep checked =
      gradients_under(config, config.checkpoint, config.offload, cancel, at_step);
  RunConfig reference_config = config;
  if (reference_seed) reference_config.seed = *reference_seed;
  const OneStep reference = gradients_under(reference_config, "none", "none", cancel, at_step);

  GradientCheckResult result;
  result.loss = checked.loss;
  result.reference_loss = reference.loss;
  result.identical = same_value(checked.loss, reference.loss);
  result.loss_diff = result.identical ? 0.0 : std::abs(checked.loss - reference.loss);
  for (std::size_t i = 0; i < checked.gradients.size(); ++i) {
    const torch::Tensor a = checked.gradients[i].second.to(torch::kDouble);
    const torch::Tensor b = reference.gradients[i].second.to(torch::kDouble);
    const torch::Tensor same = same_elements(a, b);
    const torch::Tensor diff = torch::where(same, torch::zeros_like(a), (a - b).abs());
    const double abs_diff = diff.max().item<double>();
    const double rel_diff =
        torch::where(same, torch::zeros_like(a), diff / b.abs().clamp_min(1e-30))
            .max()
            .item<double>();
    if (abs_diff > result.max_abs_diff) {
      result.worst_param = checked.gradients[i].first;
    }
    result.max_abs_diff = std::max(result.max_abs_diff, abs_diff);
    result.max_rel_diff = std::max(result.max_rel_diff, rel_diff);
    result.identical = result.identical && same.all().item<bool>();
    ++result.params_compared;
  }
  return result;
}

nlohmann::json to_json(const GradientCheckResult& result) {
  return {{"identical", result.identical},
          {"max_abs_diff", result.max_abs_diff},
          {"max_rel_diff", result.max_rel_diff},
          {"loss_diff", result.loss_diff},
          {"params_compared", result.params_compared},
          {"loss", result.loss},
          {"reference_loss", result.reference_loss},
          {"worst_param", result.worst_param}};
}

}  // namespace rematlab
