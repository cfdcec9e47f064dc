#include "train/run_summary.h"

#include <algorithm>

#include "memory/memory_phase.h"

namespace rematlab {
namespace {

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const std::size_t middle = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + middle, values.end());
  const double upper = values[middle];
  if (values.size() % 2 == 1) return upper;
  return 0.5 * (upper + *std::max_element(values.begin(), values.begin() + middle));
}

}  // namespace

std::string to_string(RunStatus status) {
  switch (status) {
    case RunStatus::kOk: return "ok";
    case RunStatus::kOom: return "oom";
    case RunStatus::kCancelled: return "cancelled";
    case RunStatus::kDiverged: return "diverged";
  }
  return "ok";
}

void RunSummary::summarize() {
  steps_completed = static_cast<int64_t>(steps.size());
  if (steps.empty()) return;
  first_loss = steps.front().loss;
  final_loss = steps.back().loss;
  std::vector<const StepMetrics*> timed;
  for (const auto& step : steps) {
    if (!step.warmup) timed.push_back(&step);
  }
  if (timed.empty()) {  // stopped during warm-up: report what there is
    for (const auto& step : steps) timed.push_back(&step);
  }
  auto collect = [&](double StepMetrics::*field) {
    std::vector<double> values;
    for (const auto* step : timed) values.push_back(step->*field);
    return median(values);
  };
  tokens_per_s = collect(&StepMetrics::tokens_per_s);
  step_ms = collect(&StepMetrics::step_ms);
  forward_ms = collect(&StepMetrics::forward_ms);
  backward_ms = collect(&StepMetrics::backward_ms);
  offload_wait_ms = collect(&StepMetrics::offload_wait_ms);
  peak_bytes = baseline_bytes = peak_activation_bytes = saved_activation_bytes = 0;
  offloaded_peak_bytes = rss_peak_bytes = reserved_bytes = device_used_bytes = 0;
  for (const auto* step : timed) {
    peak_bytes = std::max(peak_bytes, step->peak_bytes);
    baseline_bytes = std::max(baseline_bytes, step->baseline_bytes);
    peak_activation_bytes = std::max(peak_activation_bytes, step->peak_activation_bytes);
    saved_activation_bytes = std::max(saved_activation_bytes, step->saved_activation_bytes);
    offloaded_peak_bytes = std::max(offloaded_peak_bytes, step->offloaded_peak_bytes);
    rss_peak_bytes = std::max(rss_peak_bytes, step->rss_peak_bytes);
    reserved_bytes = std::max(reserved_bytes, step->reserved_bytes);
    device_used_bytes = std::max(device_used_bytes, step->device_used_bytes);
  }
}

nlohmann::json to_json(const StepMetrics& step) {
  return {{"step", step.step},
          {"warmup", step.warmup},
          {"loss", step.loss},
          {"grad_norm", step.grad_norm},
          {"loss_scale", step.loss_scale},
          {"skipped", step.skipped},
          {"step_ms", step.step_ms},
          {"forward_ms", step.forward_ms},
          {"backward_ms", step.backward_ms},
          {"optimizer_ms", step.optimizer_ms},
          {"tokens_per_s", step.tokens_per_s},
          {"current_bytes", step.current_bytes},
          {"baseline_bytes", step.baseline_bytes},
          {"peak_bytes", step.peak_bytes},
          {"peak_activation_bytes", step.peak_activation_bytes},
          {"reserved_bytes", step.reserved_bytes},
          {"device_used_bytes", step.device_used_bytes},
          {"saved_activation_bytes", step.saved_activation_bytes},
          {"offloaded_peak_bytes", step.offloaded_peak_bytes},
          {"offload_wait_ms", step.offload_wait_ms},
          {"rss_bytes", step.rss_bytes},
          {"checkpoint_interval", step.checkpoint_interval},
          {"recomputed_segments", step.recomputed_segments}};
}

nlohmann::json to_json(const RunSummary& summary) {
  const RunConfig& config = summary.config;
  nlohmann::json json = {
      {"status", to_string(summary.status)},
      {"device", config.device},
      {"precision", to_string(config.precision)},
      {"attention", to_string(config.model.attention)},
      {"checkpoint", config.checkpoint},
      {"offload", config.offload},
      {"params", summary.params},
      {"layers", config.model.layers},
      {"d_model", config.model.d_model},
      {"heads", config.model.heads},
      {"seq_len", config.model.seq_len},
      {"vocab", config.model.vocab},
      {"batch", config.batch},
      {"accum", config.accum},
      {"steps", summary.steps_completed},
      {"first_loss", summary.first_loss},
      {"final_loss", summary.final_loss},
      {"tokens_per_s", summary.tokens_per_s},
      {"step_ms", summary.step_ms},
      {"forward_ms", summary.forward_ms},
      {"backward_ms", summary.backward_ms},
      {"peak_bytes", summary.peak_bytes},
      {"baseline_bytes", summary.baseline_bytes},
      {"peak_activation_bytes", summary.peak_activation_bytes},
      {"saved_activation_bytes", summary.saved_activation_bytes},
      {"offloaded_peak_bytes", summary.offloaded_peak_bytes},
      {"offload_wait_ms", summary.offload_wait_ms},
      {"rss_peak_bytes", summary.rss_peak_bytes},
      {"reserved_bytes", summary.reserved_bytes},
      {"device_used_bytes", summary.device_used_bytes},
      {"model_flops", summary.model_flops},
      {"hardware_flops", summary.hardware_flops},
      {"achieved_flops", summary.achieved_flops},
      {"peak_flops", summary.peak_flops},
      {"mfu", summary.mfu},
      {"hfu", summary.hfu},
      {"run_id", summary.run_id ? nlohmann::json(*summary.run_id) : nlohmann::json(nullptr)},
  };
  if (!summary.message.empty()) json["status_message"] = summary.message;
  if (!summary.timeline.empty()) {
    nlohmann::json points = nlohmann::json::array();
    for (const auto& point : summary.timeline) {
      points.push_back({{"t_ms", point.time_ms}, {"bytes", point.bytes},
                        {"phase", to_string(point.phase)}});
    }
    json["timeline"] = {{"step", summary.timeline_step}, {"points", std::move(points)}};
  }
  return json;
}

}  // namespace rematlab
