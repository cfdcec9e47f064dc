#include "store/step_fields.h"

#include <stdexcept>

#include "common/json_numbers.h"

namespace rematlab {

const std::vector<StepField>& step_fields() {
  static const std::vector<StepField> fields = {
      {"step", &StepMetrics::step},
      {"total_steps", &StepMetrics::total_steps},
      {"warmup", &StepMetrics::warmup},
      {"loss", &StepMetrics::loss},
      {"grad_norm", &StepMetrics::grad_norm},
      {"loss_scale", &StepMetrics::loss_scale},
      {"skipped", &StepMetrics::skipped},
      {"step_ms", &StepMetrics::step_ms},
      {"forward_ms", &StepMetrics::forward_ms},
      {"backward_ms", &StepMetrics::backward_ms},
      {"optimizer_ms", &StepMetrics::optimizer_ms},
      {"tokens_per_s", &StepMetrics::tokens_per_s},
      {"current_bytes", &StepMetrics::current_bytes},
      {"baseline_bytes", &StepMetrics::baseline_bytes},
      {"peak_bytes", &StepMetrics::peak_bytes},
      {"peak_activation_bytes", &StepMetrics::peak_activation_bytes},
      {"saved_activation_bytes", &StepMetrics::saved_activation_bytes},
      {"offloaded_peak_bytes", &StepMetrics::offloaded_peak_bytes},
      {"offload_wait_ms", &StepMetrics::offload_wait_ms},
      {"rss_bytes", &StepMetrics::rss_bytes},
      {"rss_peak_bytes", &StepMetrics::rss_peak_bytes},
      {"checkpoint_interval", &StepMetrics::checkpoint_interval},
      {"recomputed_segments", &StepMetrics::recomputed_segments},
      // Schema 3 added these; the steps table's columns keep this order.
      {"reserved_bytes", &StepMetrics::reserved_bytes},
      {"device_used_bytes", &StepMetrics::device_used_bytes},
      // Schema 5.
      {"comm_ms", &StepMetrics::comm_ms},
      {"comm_wait_ms", &StepMetrics::comm_wait_ms},
      // Schema 7.
      {"parameter_gathers", &StepMetrics::parameter_gathers},
      {"recompute_gathers", &StepMetrics::recompute_gathers},
      // Schema 8.
      {"bubble_ms", &StepMetrics::bubble_ms},
      {"transfer_ms", &StepMetrics::transfer_ms},
      // Schema 9.
      {"balance_loss", &StepMetrics::balance_loss},
      // Schema 10.
      {"expert_load", &StepMetrics::expert_load},
      {"dispatch_ms", &StepMetrics::dispatch_ms},
      // Schema 11.
      {"expert_rank_load", &StepMetrics::expert_rank_load},
      // Schema 12.
      {"expert_block_load", &StepMetrics::expert_block_load},
  };
  return fields;
}

std::string step_field_text(const StepMetrics& step, const StepField& field) {
  return std::visit(
      [&](auto member) -> std::string {
        const auto value = step.*member;
        if constexpr (std::is_same_v<decltype(value), const bool>) {
          return value ? "1" : "0";
        } else if constexpr (std::is_same_v<decltype(value), const double>) {
          return number_text(value);  // shortest exact text; nan, inf, -inf
        } else {
          return std::to_string(value);
        }
      },
      field.member);
}

nlohmann::json step_to_json(const StepMetrics& step) {
  nlohmann::json json = nlohmann::json::object();
  for (const StepField& field : step_fields()) {
    std::visit(
        [&](auto member) {
          if constexpr (std::is_same_v<decltype(member), double StepMetrics::*>) {
            json[field.name] = json_number(step.*member);
          } else {
            json[field.name] = step.*member;
          }
        },
        field.member);
  }
  return json;
}

StepMetrics step_from_json(const nlohmann::json& json) {
  if (!json.is_object()) throw std::invalid_argument("a step must be a JSON object");
  StepMetrics step;
  for (const StepField& field : step_fields()) {
    if (!json.contains(field.name)) continue;
    const nlohmann::json& value = json.at(field.name);
    std::visit(
        [&](auto member) {
          using Member = decltype(member);
          if constexpr (std::is_same_v<Member, double StepMetrics::*>) {
            step.*member = number_from_json(value);
          } else if constexpr (std::is_same_v<Member, bool StepMetrics::*>) {
            if (!value.is_boolean()) {
              throw std::invalid_argument(std::string("step field ") + field.name +
                                          " must be true or false");
            }
            step.*member = value.get<bool>();
          } else {
            if (!value.is_number_integer()) {
              throw std::invalid_argument(std::string("step field ") + field.name +
                                          " must be a whole number");
            }
            step.*member = value.get<int64_t>();
          }
        },
        field.member);
  }
  return step;
}

}  // namespace rematlab
