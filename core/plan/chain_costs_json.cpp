#include "plan/chain_costs_json.h"

#include <stdexcept>

#include "checkpoint/checkpoint_policy.h"

namespace rematlab::plan {
namespace {

template <typename T>
T field(const nlohmann::json& object, const char* key) {
  if (!object.is_object() || !object.contains(key)) {
    throw std::invalid_argument(std::string("a chain profile without '") + key + "'");
  }
  try {
    return object.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw std::invalid_argument(std::string("a chain profile whose '") + key + "' is not a number");
  }
}

}  // namespace

nlohmann::json to_json(const ChainCosts& costs) {
  nlohmann::json stages = nlohmann::json::array();
  for (std::size_t i = 0; i < costs.stages.size(); ++i) {
    const StageCost& stage = costs.stages[i];
    stages.push_back({{"name", sublayer_name(static_cast<int64_t>(i))},
                      {"forward_ms", stage.forward_ms},
                      {"backward_ms", stage.backward_ms},
                      {"early_stop_saving_ms", stage.early_stop_saving_ms},
                      {"kept_bytes", stage.kept_bytes},
                      {"output_bytes", stage.output_bytes},
                      {"forward_transient_bytes", stage.forward_transient_bytes},
                      {"backward_transient_bytes", stage.backward_transient_bytes}});
  }
  return {{"stages", stages},
          {"input_bytes", costs.input_bytes},
          {"head_peak_bytes", costs.head_peak_bytes},
          {"embedding_backward_peak_bytes", costs.embedding_backward_peak_bytes},
          {"fixed_ms", costs.fixed_ms},
          {"time_scale", costs.time_scale}};
}

ChainCosts chain_costs_from_json(const nlohmann::json& json) {
  ChainCosts costs;
  costs.input_bytes = field<int64_t>(json, "input_bytes");
  costs.head_peak_bytes = field<int64_t>(json, "head_peak_bytes");
  costs.embedding_backward_peak_bytes = field<int64_t>(json, "embedding_backward_peak_bytes");
  costs.fixed_ms = field<double>(json, "fixed_ms");
  costs.time_scale = field<double>(json, "time_scale");
  const nlohmann::json stages = field<nlohmann::json>(json, "stages");
  if (!stages.is_array() || stages.empty()) {
    throw std::invalid_argument("a chain profile without stages");
  }
  for (const nlohmann::json& entry : stages) {
    StageCost stage;
    stage.forward_ms = field<double>(entry, "forward_ms");
    stage.backward_ms = field<double>(entry, "backward_ms");
    stage.early_stop_saving_ms = field<double>(entry, "early_stop_saving_ms");
    stage.kept_bytes = field<int64_t>(entry, "kept_bytes");
    stage.output_bytes = field<int64_t>(entry, "output_bytes");
    stage.forward_transient_bytes = field<int64_t>(entry, "forward_transient_bytes");
    stage.backward_transient_bytes = field<int64_t>(entry, "backward_transient_bytes");
    costs.stages.push_back(stage);
  }
  return costs;
}

}  // namespace rematlab::plan
