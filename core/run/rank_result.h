// One rank's figures in a data-parallel run, as rank 0 records them with the run: medians and
// maxima over its timed steps (as RunResult's), its communication, and the model states it
// holds, which sharding divides among ranks. No LibTorch here.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rematlab {

struct RankResult {
  int rank = 0;
  std::string host;
  int64_t pid = 0;
  int64_t peak_bytes = 0;
  int64_t baseline_bytes = 0;  // live when a step begins: this rank's model states and buffers
  int64_t peak_activation_bytes = 0;
  double step_ms = 0.0;
  double comm_ms = 0.0;         // collectives in flight
  double comm_wait_ms = 0.0;    // the training thread blocked on them
  double comm_hidden_ms = 0.0;  // comm_ms - comm_wait_ms: overlapped with computation
  // A pipeline stage's part of comm_wait_ms: its bubble and its transfers (step_metrics.h).
  double bubble_ms = 0.0;
  double transfer_ms = 0.0;
  // Expert parallelism's part of comm_wait_ms: its all-to-all exchanges (step_metrics.h).
  double dispatch_ms = 0.0;
  // Model states this rank holds between steps (unique storages): parameters, gradients and
  // optimizer state.
  int64_t param_bytes = 0;
  int64_t grad_bytes = 0;
  int64_t optimizer_bytes = 0;
  // The most its communication buffers held at once beside the model states (whole units and
  // gradients under --shard parameters, whole buckets under gradients; parallel/data_exchange.h).
  int64_t buffer_peak_bytes = 0;
  std::vector<int64_t> step_peak_bytes;  // every step's peak, for one memory curve per rank

  int64_t model_state_bytes() const { return param_bytes + grad_bytes + optimizer_bytes; }
};

nlohmann::json to_json(const RankResult& rank);
// Missing or mistyped keys read as zero (a record from another version still reads).
RankResult rank_result_from_json(const nlohmann::json& json);

}  // namespace rematlab
