#include "plan/chain_costs_json.h"

#include <limits>
#include <stdexcept>
#include <utility>

#include "checkpoint/checkpoint_policy.h"

namespace rematlab::plan {
namespace {

// Kept profiles are read back from a database anyone may have edited: every figure is checked
// against what a measurement can give, so that a negative, non-finite or absurd value makes the
// row unreadable (measured again) instead of reaching the planner's tables.
constexpr int64_t kMaxBytes = int64_t{1} << 50;  // 1 PiB: beyond any device
constexpr double kMaxMs = 1e7;                   // close to three hours for one piece

const nlohmann::json& member(const nlohmann::json& object, const char* key) {
  if (!object.is_object() || !object.contains(key)) {
    throw std::invalid_argument(std::string("a chain profile without '") + key + "'");
  }
  return object.at(key);
}

int64_t bytes_field(const nlohmann::json& object, const char* key) {
  const nlohmann::json& value = member(object, key);
  // An integer in range: get<int64_t>() of a float or of a too large unsigned is no byte count.
  if (value.is_number_unsigned() && value.get<uint64_t>() <= static_cast<uint64_t>(kMaxBytes)) {
    return value.get<int64_t>();
  }
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    const int64_t bytes = value.get<int64_t>();
    if (bytes >= 0 && bytes <= kMaxBytes) return bytes;
  }
  throw std::invalid_argument(std::string("a chain profile whose '") + key +
                              "' is not a byte count between 0 and 1 PiB");
}

double ms_field(const nlohmann::json& object, const char* key, double low = 0.0,
                double high = kMaxMs) {
  const nlohmann::json& value = member(object, key);
  const double ms = value.is_number() ? value.get<double>() : -1.0;
  if (!value.is_number() || !(ms >= low && ms <= high)) {
    throw std::invalid_argument(std::string("a chain profile whose '") + key +
                                "' is not a number between " + std::to_string(low) + " and " +
                                std::to_string(high));
  }
  return ms;
}

// Every byte figure of the chain added up, or just past kMaxBytes once it is over: each figure
// is at most kMaxBytes, so stopping there keeps every partial sum far inside int64.
int64_t total_bytes(const ChainCosts& costs) {
  int64_t total = costs.input_bytes + costs.head_peak_bytes + costs.embedding_backward_peak_bytes;
  for (const StageCost& stage : costs.stages) {
    if (total > kMaxBytes) break;
    total += stage.kept_bytes + stage.output_bytes + stage.forward_transient_bytes +
             stage.backward_transient_bytes;
  }
  return total;
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
  nlohmann::json json = {{"stages", stages},
                         {"input_bytes", costs.input_bytes},
                         {"head_peak_bytes", costs.head_peak_bytes},
                         {"embedding_backward_peak_bytes", costs.embedding_backward_peak_bytes},
                         {"fixed_ms", costs.fixed_ms},
                         {"time_scale", costs.time_scale}};
  if (costs.has_end_times()) {  // unknown in a profile kept before: left out, as it was
    json["embedding_ms"] = costs.embedding_ms;
    json["head_ms"] = costs.head_ms;
  }
  return json;
}

ChainCosts chain_costs_from_json(const nlohmann::json& json) {
  ChainCosts costs;
  costs.input_bytes = bytes_field(json, "input_bytes");
  costs.head_peak_bytes = bytes_field(json, "head_peak_bytes");
  costs.embedding_backward_peak_bytes = bytes_field(json, "embedding_backward_peak_bytes");
  costs.fixed_ms = ms_field(json, "fixed_ms");
  // Parts of it, unknown in a profile kept before they were recorded: plan: still plans from
  // it, and --pp-split balanced measures the chain again.
  for (const auto& [key, ms] :
       {std::pair<const char*, double*>{"embedding_ms", &costs.embedding_ms},
        {"head_ms", &costs.head_ms}}) {
    *ms = json.contains(key) ? ms_field(json, key, 0.0, costs.fixed_ms)
                             : std::numeric_limits<double>::quiet_NaN();
  }
  // A whole step over the sum of its pieces: near 1, never 0 (it divides nothing, but scales
  // every time the planner adds).
  costs.time_scale = ms_field(json, "time_scale", 1e-3, 1e3);
  const nlohmann::json& stages = member(json, "stages");
  // 2 per block; a model of over a million blocks is refused long before a profile.
  if (!stages.is_array() || stages.empty() || stages.size() > 2'000'000) {
    throw std::invalid_argument("a chain profile without stages");
  }
  for (const nlohmann::json& entry : stages) {
    StageCost stage;
    stage.forward_ms = ms_field(entry, "forward_ms");
    stage.backward_ms = ms_field(entry, "backward_ms");
    stage.early_stop_saving_ms = ms_field(entry, "early_stop_saving_ms", 0.0, stage.forward_ms);
    stage.kept_bytes = bytes_field(entry, "kept_bytes");
    stage.output_bytes = bytes_field(entry, "output_bytes");
    stage.forward_transient_bytes = bytes_field(entry, "forward_transient_bytes");
    stage.backward_transient_bytes = bytes_field(entry, "backward_transient_bytes");
    costs.stages.push_back(stage);
  }
  // Each figure within range may still add up past what int64 counts (a pipeline stage's plan
  // adds whole chunks for every micro-batch in flight): the chain as a whole holds at most 1 PiB.
  if (total_bytes(costs) > kMaxBytes) {
    throw std::invalid_argument("a chain profile holding more than 1 PiB in all");
  }
  return costs;
}

}  // namespace rematlab::plan
