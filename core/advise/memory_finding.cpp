#include "advise/memory_finding.h"

#include <algorithm>

#include "checkpoint/checkpoint_policy.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "estimate/estimate.h"
#include "estimate/fine_tuning.h"
#include "estimate/sharded_states.h"
#include "estimate/sharded_units.h"
#include "layout/run_layout.h"
#include "model/model_config.h"
#include "run/run_config.h"
#include "run/run_summary.h"

namespace rematlab::advise {
namespace {

struct Cause {
  std::string title;
  std::vector<Evidence> evidence;
  Wording next_step;
};

// What a memory finding weighs the run against: for one rank (or one tensor or expert rank) the
// estimator's figures, for a pipeline the layout planner's of its fullest stage.
struct MemoryEstimates {
  int64_t none_peak = 0;         // the peak under none, model states included
  int64_t none_activations = 0;  // what `what` names under none and under the run's policy
  int64_t run_activations = 0;
  int64_t kept_bytes = 0;      // what the run's policy keeps beyond every:1
  bool holds_head = true;      // the fullest rank has the logits (a pipeline's last stage)
  std::string what = "saved";  // "saved", or "stage 0's activations"
};

std::optional<Cause> specific_cause(const RunRecord& run, const MemoryEstimates& estimated) {
  const RunConfig& config = run.config;
  if (config.checkpoint.rfind("selective", 0) == 0 &&
      config.model.attention == AttentionKind::kSdpa) {
    // Fused attention keeps no s×s scores, which is all `selective` recomputes.
    return Cause{
        "selective under fused attention (SDPA) recomputes nothing that was kept",
        {{config.pp > 1 ? "saved for backward (measured, rank 0)" : "saved for backward (measured)",
          format_bytes(run.result.saved_activation_bytes)},
         {estimated.what + " under none (estimated)", format_bytes(estimated.none_activations)},
         {estimated.what + " under selective (estimated)",
          format_bytes(estimated.run_activations)}},
        setting("checkpoint", "every:1") + " (selective pays only with " +
            setting("attention", "math") + ", whose s×s scores it recomputes)"};
  }
  if (parse_offload(config.offload).kind == OffloadKind::kHost && config.device == "cpu") {
    return Cause{"host offload on a CPU device moves tensors within the same memory",
                 {{"offloaded at once (measured)", format_bytes(run.result.offloaded_peak_bytes)},
                  {"device", config.device}},
                 setting("offload", "none") + " on CPU (offload saves device memory on CUDA), or " +
                     setting("offload", "disk")};
  }
  return std::nullopt;
}

bool splits_over(const ModelConfig& model, int64_t tp, bool sequence_parallel) {
  try {
    validate_tensor_split(model, tp, sequence_parallel);
    return true;
  } catch (const InvalidInput&) {
    return false;
  }
}

// Fine-tuning keeps its frozen base whole on every rank: what shrinks its states is the base's
// storage.
Wording fine_tuning_states_advice(const RunConfig& config) {
  if (config.model.lora.base == BasePrecision::kNf4) {
    return Wording("a device with more memory (the base is at its smallest, nf4)");
  }
  return setting("base_precision", "nf4") +
         " stores the frozen projections in half a byte a weight (int8: one byte)";
}

// Expert ranks shard nothing yet: what divides their states is more of them, on the fewest
// ranks (as `estimate` advises).
Wording expert_states_advice(const RunConfig& config) {
  const int64_t experts = config.model.moe.experts;
  const std::vector<ExpertSplit> splits =
      more_expert_splits(experts, config.ep, config.world_size, kMaxWorldSize);
  Wording more;
  if (splits.empty()) {
    more = Wording(config.ep >= experts
                       ? "a device with more memory (each expert rank holds one of the " +
                             std::to_string(experts) + " experts already)"
                       : "a device with more memory (no more expert ranks split the " +
                             std::to_string(experts) + " experts on up to " +
                             std::to_string(kMaxWorldSize) + " ranks)");
  } else {
    const ExpertSplit& split = splits.front();
    more = (split.ranks != config.world_size ? setting("nproc", std::to_string(split.ranks)) + " "
                                             : Wording()) +
           setting("ep", std::to_string(split.expert_ranks)) + " gives each expert rank " +
           std::to_string(experts / split.expert_ranks) + " of the " + std::to_string(experts) +
           " experts (now " + std::to_string(experts / config.ep) + ")";
  }
  if (config.precision == Precision::kFp32) {
    return setting("precision", "bf16") + " halves the weights and gradients; " + more;
  }
  return more;
}

// What divides the model states further, from what the run already does: shard more of them
// over its data ranks, then (fully sharded) over twice the data ranks; or, split over tensor
// ranks, split over twice as many where the model splits evenly. bf16 halves the weights and
// gradients where the shard mode trains in it.
Wording states_advice(const RunConfig& config) {
  if (config.model.lora.enabled()) return fine_tuning_states_advice(config);
  if (config.ep > 1) return expert_states_advice(config);
  const ShardMode shard = parse_shard(config.shard);
  const int64_t data_ranks = config.data_ranks();
  const bool fp32 = config.precision == Precision::kFp32;
  const std::string ranks = std::to_string(data_ranks) + " data ranks";
  // fp16 shards the optimizer state only (its loss scaling needs whole gradients).
  const bool gradients = shard_trains_in(ShardMode::kGradients, config.precision);
  // Experts are not sharded as parameters yet, nor are pipeline stages' parameters.
  const ShardMode most = fp32 && !config.model.moe.enabled() && config.pp == 1
                             ? ShardMode::kParameters
                             : (gradients ? ShardMode::kGradients : ShardMode::kOptimizer);
  Wording more;
  if (data_ranks > 1 && shard < ShardMode::kGradients && gradients) {
    more = setting("shard", "gradients") + " shards the gradients and optimizer state over its " +
           ranks;
  } else if (data_ranks > 1 && shard < most) {
    more = setting("shard", to_string(most)) + " shards " +
           (most == ShardMode::kParameters ? "the weights" : "the optimizer state") + " over its " +
           ranks + (most == ShardMode::kParameters ? " too" : "");
  } else if (2 * config.world_size <= kMaxWorldSize) {
    const ShardMode next = std::max(shard, most);
    more = setting("nproc", std::to_string(2 * config.world_size)) + " " +
           setting("shard", to_string(next)) + " shards " +
           (next == ShardMode::kOptimizer ? "the optimizer state" : "the model states") +
           " over twice the data ranks";
  } else {
    more = Wording("a device with more memory");
  }
  if (config.tp > 1 && splits_over(config.model, 2 * config.tp, config.sequence_parallel) &&
      2 * config.world_size <= kMaxWorldSize) {
    more = more + "; or " + setting("nproc", std::to_string(2 * config.world_size)) + " " +
           setting("tp", std::to_string(2 * config.tp)) +
           " splits them over twice the tensor ranks";
  }
  if (fp32 && shard != ShardMode::kParameters) {
    return setting("precision", "bf16") + " halves the weights and gradients; " + more;
  }
  return more;
}

Cause dominant_cause(const RunRecord& run, int64_t logits_bytes, int64_t kept_bytes,
                     const std::string& kept_plan) {
  const int64_t states = run.result.baseline_bytes;
  const int64_t peak = std::max<int64_t>(run.result.peak_bytes, 1);
  const auto share = [peak](int64_t bytes) {
    return format_bytes(bytes) + " (" +
           format_percent(static_cast<double>(bytes) / static_cast<double>(peak)) + " of the peak)";
  };
  if (states >= logits_bytes && states >= kept_bytes) {
    return Cause{"the model states dominate the peak, and checkpointing reduces activations only",
                 {{"model states (live when a step begins)", share(states)}},
                 states_advice(run.config)};
  }
  if (logits_bytes >= kept_bytes) {
    return Cause{
        "the logits and loss dominate the activations",
        {{"logits with their softmax (estimated)", share(logits_bytes)},
         {"loss slices", std::to_string(run.config.model.loss_chunk_count())}},
        setting("loss_chunks", "auto") + " (the head and loss in slices no wider than the MLP)"};
  }
  const CheckpointPolicy policy = CheckpointPolicy::parse(run.config.checkpoint);
  if (!policy.is_plan() && policy.plan_for(run.config.model.layers, 0.0).keep.any()) {
    // keep: recomputes every block already; what it saves are the kept projections' outputs.
    return Cause{"the projection outputs the policy keeps dominate the activations",
                 {{"kept beyond every:1 (estimated)", share(kept_bytes)}, {"plan", kept_plan}},
                 "a shorter keep: list (keep:qkv keeps the least), or every:1 to keep none"};
  }
  return Cause{"the segments the plan keeps dominate the activations",
               {{"kept beyond every:1 (estimated)", share(kept_bytes)}, {"plan", kept_plan}},
               setting("checkpoint", "every:1") + " (recompute every block), or a smaller K"};
}

// The run's shape as the estimator counts it, its experts at the loads its steps recorded.
estimate::Architecture estimated_architecture(const RunConfig& config,
                                              const std::vector<StepMetrics>& steps) {
  estimate::Architecture arch = estimate::from_model_config(config.model);
  const RecordedExpertLoads loads = recorded_expert_loads(config, steps);
  arch.expert_rank_load = loads.rank;
  arch.expert_block_load = loads.block;
  arch.expert_load = loads.expert;
  arch.expert_ranks = config.ep;
  return arch;
}

// One rank's figures by the estimator (split over tensor ranks, one rank's, as the run's peaks
// are; over expert ranks the fullest rank's at the loads `steps` recorded), its states under none
// sharded over the data ranks as the run's were.
MemoryEstimates rank_estimates(const RunConfig& config, const std::vector<StepMetrics>& steps) {
  const estimate::Architecture arch = estimated_architecture(config, steps);
  const bool offload = config.offload != "none";
  const estimate::TensorLayout layout{config.tp, config.sequence_parallel};
  auto estimated = [&](const std::string& policy, bool offloaded) {
    return estimate::estimate_policy_activations(arch, config.batch, config.precision, policy,
                                                 offloaded, estimate::Optimizer::kAdamW, layout);
  };
  const estimate::ActivationEstimate none = estimated("none", false);
  const estimate::ActivationEstimate planned = estimated(config.checkpoint, offload);
  const estimate::ActivationEstimate every = estimated("every:1", offload);
  // An expert rank holds its own experts only.
  const int64_t rank_params = config.ep > 1 ? estimate::expert_rank_parameter_count(arch, config.ep)
                                            : estimate::rank_parameter_count(arch, config.tp);
  int64_t states =
      estimate::per_rank_model_states(
          config.model.lora.enabled() ? estimate::fine_tuning_state_bytes(
                                            arch, config.precision, estimate::Optimizer::kAdamW)
                                      : estimate::model_state_bytes(rank_params, config.precision,
                                                                    estimate::Optimizer::kAdamW),
          config.data_ranks(), config.shard)
          .total();
  if (parse_shard(config.shard) == ShardMode::kParameters) {
    states += estimate::gathered_unit_bytes(arch, config.precision, config.tp);
  }
  MemoryEstimates result;
  result.none_peak = states + none.peak_bytes;
  result.none_activations = none.saved_bytes;
  result.run_activations = planned.saved_bytes;
  result.kept_bytes = std::max<int64_t>(0, planned.saved_bytes - every.saved_bytes);
  return result;
}

// A pipeline's fullest stage by the layout planner (the stage the run's policy gives the highest
// peak; the run's peak is its fullest stage's), under none, the run's policy and every:1.
MemoryEstimates stage_estimates(const RunConfig& config) {
  const layout::LayoutEvaluation planned = layout::evaluate_run(config);
  const layout::LayoutEvaluation none = layout::evaluate_run(config, "none");
  const layout::LayoutEvaluation every = layout::evaluate_run(config, "every:1");
  const auto fullest = static_cast<size_t>(
      std::max_element(planned.stages.begin(), planned.stages.end(),
                       [](const layout::StageFigures& a, const layout::StageFigures& b) {
                         return a.memory.total() < b.memory.total();
                       }) -
      planned.stages.begin());
  MemoryEstimates result;
  result.none_peak = none.memory.total();
  result.none_activations = none.stages.at(fullest).memory.activations;
  result.run_activations = planned.stages.at(fullest).memory.activations;
  result.kept_bytes =
      std::max<int64_t>(0, result.run_activations - every.stages.at(fullest).memory.activations);
  result.holds_head = static_cast<int64_t>(fullest) + 1 == config.pp;
  result.what = "stage " + std::to_string(fullest) + "'s activations";
  return result;
}

}  // namespace

std::optional<std::string> unestimable(const RunConfig& config) {
  if (config.pp > 1) {
    try {  // by the layout planner, stage by stage: what it cannot evaluate, said (under none
           // and every:1, the same degrees, it can then too)
      layout::evaluate_run(config);
      return std::nullopt;
    } catch (const InvalidInput& error) {
      return "pipeline stages: " + std::string(error.what());
    }
  }
  // What `run` and `estimate` refuse, found in a record edited by hand: not estimated, said so.
  if (config.model.moe.enabled() && config.ep > 1 && (config.tp > 1 || config.shard != "none")) {
    return std::string(
        "experts over expert ranks with tensor ranks or sharded states are not "
        "estimated (nor run)");
  }
  try {
    validate_expert_ranks(config.ep, config.model.moe, config.data_ranks());
    const estimate::Architecture arch = estimate::from_model_config(config.model);
    estimate::validate(arch);
    estimate::validate(arch, {config.tp, config.sequence_parallel});
    return std::nullopt;
  } catch (const InvalidInput& error) {
    return std::string(error.what());
  }
}

std::optional<Finding> diagnose_memory(const RunRecord& run, const std::vector<StepMetrics>& steps,
                                       const std::optional<RunRecord>& none_run,
                                       std::vector<Wording>& notes) {
  const RunConfig& config = run.config;
  const bool offload = config.offload != "none";
  const MemoryEstimates estimated =
      config.pp > 1 ? stage_estimates(config) : rank_estimates(config, steps);

  int64_t reference_peak = 0;
  std::string reference_text;
  if (none_run) {
    reference_peak = none_run->result.peak_bytes;
    reference_text =
        format_bytes(reference_peak) + " (run #" + std::to_string(none_run->id) + ", measured)";
  } else {
    reference_peak = estimated.none_peak;
    reference_text = format_bytes(reference_peak) +
                     (config.pp > 1 ? " (estimated, the fullest stage's)" : " (estimated)");
    notes.push_back(
        "memory: no `none` run of the same configuration in the database, so its peak is the "
        "estimator's (run the same settings with " +
        setting("checkpoint", "none") + " to measure it)");
  }
  if (reference_peak <= 0) return std::nullopt;
  const double reduction =
      1.0 - static_cast<double>(run.result.peak_bytes) / static_cast<double>(reference_peak);
  if (reduction >= kMemoryReductionThreshold) return std::nullopt;

  const int64_t tokens = config.batch * config.model.seq_len;
  const int64_t chunks = std::max<int64_t>(1, config.model.loss_chunk_count());
  // fp32 logits of one slice and the softmax kept for backward (a tensor rank's columns), where
  // the fullest rank has the head.
  const int64_t vocab = config.model.vocab / std::max<int64_t>(1, config.tp);
  const int64_t logits_bytes =
      estimated.holds_head ? 2 * tokens * ((vocab + chunks - 1) / chunks) * 4 : 0;
  // The recorded split only where stages were estimated (run_layout checked it against the
  // pipeline); a hand-edited one beside one process is no split.
  const std::string kept_plan =
      CheckpointPolicy::parse(config.checkpoint)
          .plan_for(config.model.layers, 1.0,
                    config.pp > 1 ? config.pp_split : std::vector<int64_t>{})
          .describe();

  const Cause cause =
      specific_cause(run, estimated)
          .value_or(dominant_cause(run, logits_bytes, estimated.kept_bytes, kept_plan));
  Finding finding;
  finding.kind = FindingKind::kMemoryNotReduced;
  finding.title = "Memory not reduced by " + config.checkpoint +
                  (offload ? "+" + config.offload : "") + ": " + cause.title;
  finding.evidence = {
      {"peak (this run)", format_bytes(run.result.peak_bytes)},
      {"peak under none", reference_text},
      {"reduction", format_percent(reduction)},
      {"activation peak (this run)", format_bytes(run.result.peak_activation_bytes)}};
  finding.evidence.insert(finding.evidence.end(), cause.evidence.begin(), cause.evidence.end());
  finding.next_step = cause.next_step;
  return finding;
}

}  // namespace rematlab::advise
