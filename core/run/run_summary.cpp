#include "run/run_summary.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/json_numbers.h"
#include "memory/memory_phase.h"
#include "run/expert_loads.h"

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

const std::vector<ResultField>& result_fields() {
  using U = ResultUnit;
  static const std::vector<ResultField> fields = {
      {"params", &RunResult::params, U::kCount},
      {"steps_completed", &RunResult::steps_completed, U::kCount},
      {"first_loss", &RunResult::first_loss, U::kLoss},
      {"final_loss", &RunResult::final_loss, U::kLoss},
      {"tokens_per_s", &RunResult::tokens_per_s, U::kTokensPerSecond, true},
      {"step_ms", &RunResult::step_ms, U::kMilliseconds},
      {"forward_ms", &RunResult::forward_ms, U::kMilliseconds},
      {"backward_ms", &RunResult::backward_ms, U::kMilliseconds},
      {"offload_wait_ms", &RunResult::offload_wait_ms, U::kMilliseconds},
      {"peak_bytes", &RunResult::peak_bytes, U::kBytes},
      {"baseline_bytes", &RunResult::baseline_bytes, U::kBytes},
      {"peak_activation_bytes", &RunResult::peak_activation_bytes, U::kBytes},
      {"saved_activation_bytes", &RunResult::saved_activation_bytes, U::kBytes},
      {"offloaded_peak_bytes", &RunResult::offloaded_peak_bytes, U::kBytes},
      {"rss_peak_bytes", &RunResult::rss_peak_bytes, U::kBytes},
      {"reserved_bytes", &RunResult::reserved_bytes, U::kBytes},
      {"device_used_bytes", &RunResult::device_used_bytes, U::kBytes},
      {"model_flops", &RunResult::model_flops, U::kFlops},
      {"hardware_flops", &RunResult::hardware_flops, U::kFlops},
      {"achieved_flops", &RunResult::achieved_flops, U::kFlops, true},
      {"peak_flops", &RunResult::peak_flops, U::kFlops},
      {"mfu", &RunResult::mfu, U::kFraction, true},
      {"hfu", &RunResult::hfu, U::kFraction, true},
      {"comm_ms", &RunResult::comm_ms, U::kMilliseconds},
      {"comm_wait_ms", &RunResult::comm_wait_ms, U::kMilliseconds},
      {"comm_hidden_ms", &RunResult::comm_hidden_ms, U::kMilliseconds, true},
      {"parameter_gathers", &RunResult::parameter_gathers, U::kCount},
      {"recompute_gathers", &RunResult::recompute_gathers, U::kCount},
      {"bubble_ms", &RunResult::bubble_ms, U::kMilliseconds},
      {"transfer_ms", &RunResult::transfer_ms, U::kMilliseconds},
      {"dispatch_ms", &RunResult::dispatch_ms, U::kMilliseconds},
  };
  return fields;
}

double result_value(const RunResult& result, const ResultField& field) {
  return std::visit([&](auto member) { return static_cast<double>(result.*member); }, field.member);
}

const ResultField* find_result_field(const std::string& name) {
  for (const ResultField& field : result_fields()) {
    if (name == field.name) return &field;
  }
  return nullptr;
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
  comm_ms = collect(&StepMetrics::comm_ms);
  comm_wait_ms = collect(&StepMetrics::comm_wait_ms);
  bubble_ms = collect(&StepMetrics::bubble_ms);
  transfer_ms = collect(&StepMetrics::transfer_ms);
  dispatch_ms = collect(&StepMetrics::dispatch_ms);
  std::vector<double> hidden;
  for (const auto* step : timed)
    hidden.push_back(std::max(0.0, step->comm_ms - step->comm_wait_ms));
  comm_hidden_ms = median(hidden);
  peak_bytes = baseline_bytes = peak_activation_bytes = saved_activation_bytes = 0;
  offloaded_peak_bytes = rss_peak_bytes = reserved_bytes = device_used_bytes = 0;
  parameter_gathers = recompute_gathers = 0;
  for (const auto* step : timed) {
    peak_bytes = std::max(peak_bytes, step->peak_bytes);
    baseline_bytes = std::max(baseline_bytes, step->baseline_bytes);
    peak_activation_bytes = std::max(peak_activation_bytes, step->peak_activation_bytes);
    saved_activation_bytes = std::max(saved_activation_bytes, step->saved_activation_bytes);
    offloaded_peak_bytes = std::max(offloaded_peak_bytes, step->offloaded_peak_bytes);
    rss_peak_bytes = std::max(rss_peak_bytes, step->rss_peak_bytes);
    reserved_bytes = std::max(reserved_bytes, step->reserved_bytes);
    device_used_bytes = std::max(device_used_bytes, step->device_used_bytes);
    parameter_gathers = std::max(parameter_gathers, step->parameter_gathers);
    recompute_gathers = std::max(recompute_gathers, step->recompute_gathers);
  }
}

void RunResult::take_memory_of_fullest_rank() {
  if (ranks.empty()) return;
  const auto fullest = std::max_element(
      ranks.begin(), ranks.end(),
      [](const RankResult& a, const RankResult& b) { return a.peak_bytes < b.peak_bytes; });
  peak_bytes = fullest->peak_bytes;
  peak_activation_bytes = fullest->peak_activation_bytes;
  baseline_bytes = fullest->baseline_bytes;
}

nlohmann::json to_json(const StepMetrics& step) {
  return {{"step", step.step},
          {"warmup", step.warmup},
          {"loss", json_number(step.loss)},
          {"grad_norm", json_number(step.grad_norm)},
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
          {"recomputed_segments", step.recomputed_segments},
          {"comm_ms", step.comm_ms},
          {"comm_wait_ms", step.comm_wait_ms},
          {"parameter_gathers", step.parameter_gathers},
          {"recompute_gathers", step.recompute_gathers},
          {"bubble_ms", step.bubble_ms},
          {"transfer_ms", step.transfer_ms},
          {"balance_loss", json_number(step.balance_loss)},
          {"expert_load", json_number(step.expert_load)},
          {"expert_rank_load", json_number(step.expert_rank_load)},
          {"expert_block_load", json_number(step.expert_block_load)},
          {"dispatch_ms", step.dispatch_ms}};
}

nlohmann::json to_json(const RunResult& result) {
  nlohmann::json json = nlohmann::json::object();
  for (const ResultField& field : result_fields()) {
    json[field.name] = std::visit(
        [&](auto member) -> nlohmann::json {
          if constexpr (std::is_same_v<decltype(member), double RunResult::*>) {
            return json_number(result.*member);
          } else {
            return result.*member;
          }
        },
        field.member);
  }
  json["peak_flops_source"] = result.peak_flops_source;
  if (!result.ranks.empty()) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const RankResult& rank : result.ranks) ranks.push_back(to_json(rank));
    json["ranks"] = std::move(ranks);
  }
  return json;
}

RunResult run_result_from_json(const nlohmann::json& json) {
  RunResult result;
  if (!json.is_object()) return result;
  for (const ResultField& field : result_fields()) {
    // Schema 3 stored the run's summary with "steps" for the steps it completed.
    const char* key = json.contains(field.name)                      ? field.name
                      : std::string(field.name) == "steps_completed" ? "steps"
                                                                     : nullptr;
    if (!key || !json.contains(key)) continue;
    const nlohmann::json& value = json.at(key);
    std::visit(
        [&](auto member) {
          if constexpr (std::is_same_v<decltype(member), double RunResult::*>) {
            result.*member = recorded_number(value);
          } else if (value.is_number_integer()) {
            result.*member = value.get<int64_t>();
          }
        },
        field.member);
  }
  if (json.contains("peak_flops_source") && json["peak_flops_source"].is_string()) {
    result.peak_flops_source = json["peak_flops_source"].get<std::string>();
  }
  if (json.contains("ranks") && json["ranks"].is_array()) {
    for (const auto& rank : json["ranks"]) result.ranks.push_back(rank_result_from_json(rank));
  }
  return result;
}

nlohmann::json to_json(const RunSummary& summary) {
  const RunConfig& config = summary.config;
  nlohmann::json json = {
      {"status", to_string(summary.status)},
      {"arch", to_string(config.model.family)},
      {"device", config.device},
      {"precision", to_string(config.precision)},
      {"attention", to_string(config.model.attention)},
      {"checkpoint", config.checkpoint},
      {"offload", config.offload},
      {"layers", config.model.layers},
      {"d_model", config.model.d_model},
      {"heads", config.model.heads},
      {"seq_len", config.model.seq_len},
      {"vocab", config.model.vocab},
      {"batch", config.batch},
      {"accum", config.accum},
      {"world_size", config.world_size},
      {"shard", config.shard},
      {"tp", config.tp},
      {"sequence_parallel", config.sequence_parallel},
      {"pp", config.pp},
      {"ep", config.ep},
      {"virtual_stages", config.virtual_stages},
      {"steps", summary.steps_completed},
  };
  json.update(to_json(static_cast<const RunResult&>(summary)));
  if (!config.pp_split.empty()) json["pp_split"] = config.pp_split;
  if (!config.pp_split_chunk_ms.empty()) {
    nlohmann::json chunk_ms = nlohmann::json::array();
    for (const double ms : config.pp_split_chunk_ms) chunk_ms.push_back(json_number(ms));
    json["pp_split_balanced_ms"] = std::move(chunk_ms);
  }
  const LoraOptions& lora = config.model.lora;
  if (lora.enabled()) {  // what trains, beside `params` (all of them, the adapters included)
    json["finetune"] = "lora";
    json["lora_rank"] = lora.rank;
    json["lora_alpha"] = lora.alpha;
    json["lora_targets"] = lora_targets_text(lora.targets);
    json["trainable_params"] = config.model.trainable_parameter_count();
    json["base_precision"] = to_string(lora.base);
  }
  json["run_id"] = summary.run_id ? nlohmann::json(*summary.run_id) : nlohmann::json(nullptr);
  if (!summary.message.empty()) json["status_message"] = summary.message;
  if (summary.planned) json["plan"] = to_json(*summary.planned);
  if (!summary.timeline.empty()) {
    nlohmann::json points = nlohmann::json::array();
    for (const auto& point : summary.timeline) {
      points.push_back(
          {{"t_ms", point.time_ms}, {"bytes", point.bytes}, {"phase", to_string(point.phase)}});
    }
    json["timeline"] = {{"step", summary.timeline_step}, {"points", std::move(points)}};
  }
  return json;
}

double most_recorded(const std::vector<StepMetrics>& steps, double StepMetrics::*figure) {
  double most = std::numeric_limits<double>::quiet_NaN();
  for (const StepMetrics& step : steps) {
    const double value = step.*figure;
    if (!std::isnan(value) && (std::isnan(most) || value > most)) most = value;
  }
  return most;
}

namespace {

// The largest of `steps`' values of `load` from 1 to `bound`: a value no run records (edited by
// hand: infinite, below 1, above the bound) is none; the other steps' still count.
double most_valid_load(const std::vector<StepMetrics>& steps, double StepMetrics::*load,
                       double bound) {
  double most = 1.0;
  for (const StepMetrics& step : steps) {
    const double value = step.*load;
    if (value >= 1.0 && value <= bound) most = std::max(most, value);
  }
  return most;
}

}  // namespace

RecordedExpertLoads recorded_expert_loads(const RunConfig& config,
                                          const std::vector<StepMetrics>& steps) {
  RecordedExpertLoads loads;
  if (!config.model.moe.enabled()) return loads;
  loads.expert =
      most_valid_load(steps, &StepMetrics::expert_load, most_expert_load(config.model.moe));
  if (config.ep <= 1) return loads;
  const double bound = most_expert_rank_load(config.model.moe, config.ep);
  loads.rank = most_valid_load(steps, &StepMetrics::expert_rank_load, bound);
  loads.block =
      std::max(loads.rank, most_valid_load(steps, &StepMetrics::expert_block_load, bound));
  return loads;
}

}  // namespace rematlab
