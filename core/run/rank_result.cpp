#include "run/rank_result.h"

#include "common/json_numbers.h"

namespace rematlab {
namespace {

template <typename T>
void read(const nlohmann::json& json, const char* key, T& value) {
  if (!json.contains(key)) return;
  const nlohmann::json& item = json.at(key);
  if constexpr (std::is_same_v<T, double>) {
    value = recorded_number(item);
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (item.is_string()) value = item.get<std::string>();
  } else {
    if (item.is_number_integer()) value = item.get<T>();
  }
}

}  // namespace

nlohmann::json to_json(const RankResult& rank) {
  return {{"rank", rank.rank},
          {"host", rank.host},
          {"pid", rank.pid},
          {"peak_bytes", rank.peak_bytes},
          {"baseline_bytes", rank.baseline_bytes},
          {"peak_activation_bytes", rank.peak_activation_bytes},
          {"step_ms", json_number(rank.step_ms)},
          {"comm_ms", json_number(rank.comm_ms)},
          {"comm_wait_ms", json_number(rank.comm_wait_ms)},
          {"comm_hidden_ms", json_number(rank.comm_hidden_ms)},
          {"bubble_ms", json_number(rank.bubble_ms)},
          {"transfer_ms", json_number(rank.transfer_ms)},
          {"dispatch_ms", json_number(rank.dispatch_ms)},
          {"param_bytes", rank.param_bytes},
          {"grad_bytes", rank.grad_bytes},
          {"optimizer_bytes", rank.optimizer_bytes},
          {"buffer_peak_bytes", rank.buffer_peak_bytes},
          {"model_state_bytes", rank.model_state_bytes()},
          {"step_peak_bytes", rank.step_peak_bytes}};
}

RankResult rank_result_from_json(const nlohmann::json& json) {
  RankResult rank;
  if (!json.is_object()) return rank;
  read(json, "rank", rank.rank);
  read(json, "host", rank.host);
  read(json, "pid", rank.pid);
  read(json, "peak_bytes", rank.peak_bytes);
  read(json, "baseline_bytes", rank.baseline_bytes);
  read(json, "peak_activation_bytes", rank.peak_activation_bytes);
  read(json, "step_ms", rank.step_ms);
  read(json, "comm_ms", rank.comm_ms);
  read(json, "comm_wait_ms", rank.comm_wait_ms);
  read(json, "comm_hidden_ms", rank.comm_hidden_ms);
  read(json, "bubble_ms", rank.bubble_ms);
  read(json, "transfer_ms", rank.transfer_ms);
  read(json, "dispatch_ms", rank.dispatch_ms);
  read(json, "param_bytes", rank.param_bytes);
  read(json, "grad_bytes", rank.grad_bytes);
  read(json, "optimizer_bytes", rank.optimizer_bytes);
  read(json, "buffer_peak_bytes", rank.buffer_peak_bytes);
  if (json.contains("step_peak_bytes") && json.at("step_peak_bytes").is_array()) {
    for (const auto& value : json.at("step_peak_bytes")) {
      rank.step_peak_bytes.push_back(value.is_number_integer() ? value.get<int64_t>() : 0);
    }
  }
  return rank;
}

}  // namespace rematlab
