// Everything `rematlab-cli estimate` reports for one request: parameter count, model states,
// activation peak under the checkpoint policy, best every:K, FLOPs per step, and whether a step
// fits in given device memories (with the largest batch that does).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "estimate/activation_memory.h"
#include "estimate/architecture.h"
#include "estimate/fit_advice.h"
#include "estimate/flops.h"
#include "estimate/model_state.h"
#include "estimate/tensor_layout.h"

namespace rematlab::estimate {

struct EstimateRequest {
  std::optional<Architecture> arch;  // absent: only a nominal size is known
  int64_t nominal_params = 0;        // --params: replaces the count for model-state figures
  Precision precision = Precision::kFp32;
  Optimizer optimizer = Optimizer::kAdamW;
  std::string checkpoint = "none";
  bool offload = false;
  int64_t batch = 1;
  std::vector<int64_t> device_memories;  // bytes; empty: 24, 40, 80 and 141 GiB
  int64_t max_batch_limit = 1 << 20;
  // Ranks in all, and what the data-parallel ranks (world_size / layout.tp of them) shard
  // (estimate/sharded_states.h); states, activations and FLOPs are one rank's.
  int64_t world_size = 1;
  std::string shard = "none";
  TensorLayout layout;  // tensor parallelism: needs a shape
  // Expert parallelism: data ranks that split a mixture's experts (needs a shape with experts).
  int64_t expert_ranks = 1;
};

struct DeviceFit {
  int64_t memory_bytes = 0;
  // Model states + activation peak at the request's batch (at least the build's bytes).
  int64_t needed_bytes = 0;
  bool fits = false;
  std::optional<int64_t> max_batch;  // largest batch predicted to fit; absent without a shape
  // With a shape: the least recomputation (then the fewest ranks) that fits at the request's
  // batch; absent when nothing does or without a shape.
  std::optional<FitAdvice> advice;
};

struct Estimate {
  EstimateRequest request;
  std::optional<int64_t> architecture_params;  // exact count from the shape
  int64_t params = 0;                          // the whole model's
  int64_t rank_params = 0;                     // one tensor rank's share (params when tp = 1)
  ModelStateBytes states;                      // one rank's (all of them for one process)
  // --shard parameters: whole units and their gradients beside the activations (sharded_units.h)
  int64_t gathered_bytes = 0;
  // What one rank needs besides its activations: states + gathered_bytes.
  int64_t fixed_bytes() const { return states.total() + gathered_bytes; }
  // --shard parameters: the rank's part of the model, whole in fp32, on its device before it is
  // sharded (0 for other layouts, whose states need more).
  int64_t build_bytes = 0;
  std::optional<ActivationEstimate> activations;
  std::optional<int64_t> best_interval;
  std::optional<int64_t> best_interval_peak_bytes;
  std::optional<StepFlops> flops;       // the whole step's, over every rank of a tensor group
  std::optional<StepFlops> rank_flops;  // one tensor rank's (the same when tp = 1)
  std::vector<DeviceFit> fits;
};

// Throws InvalidInput naming the flag for a shape, size or policy that cannot be estimated.
Estimate make_estimate(const EstimateRequest& request);

// The activation estimate for `checkpoint` at `batch`; a schedule reports its worst plan.
ActivationEstimate estimate_policy_activations(const Architecture& arch, int64_t batch,
                                               Precision precision, const std::string& checkpoint,
                                               bool offload,
                                               Optimizer optimizer = Optimizer::kAdamW,
                                               const TensorLayout& layout = {});

nlohmann::json to_json(const Estimate& estimate);

// What an answer's JSON says of fine-tuning (`estimate`'s and `layout`'s): "finetune" full or
// lora, and with adapters their rank, alpha, targets and the base's precision.
void put_fine_tuning(nlohmann::json& json, const LoraOptions& lora);

}  // namespace rematlab::estimate
