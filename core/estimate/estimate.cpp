#include "estimate/estimate.h"

#include <algorithm>

#include "common/errors.h"
#include "estimate/fine_tuning.h"
#include "estimate/sharded_states.h"
#include "estimate/sharded_units.h"
#include "run/expert_loads.h"
#include "run/run_config.h"
#include "run/shard_mode.h"

namespace rematlab::estimate {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

std::vector<int64_t> default_memories() { return {24 * kGiB, 40 * kGiB, 80 * kGiB, 141 * kGiB}; }

// The largest batch whose states + activations fit; 0 when not even one does.
int64_t max_batch(const Estimate& estimate, int64_t memory_bytes) {
  const EstimateRequest& request = estimate.request;
  auto needed = [&](int64_t batch) {
    return estimate.fixed_bytes() +
           estimate_policy_activations(*request.arch, batch, request.precision, request.checkpoint,
                                       request.offload, request.optimizer, request.layout)
               .peak_bytes;
  };
  if (needed(1) > memory_bytes || estimate.build_bytes > memory_bytes) return 0;
  int64_t low = 1;  // fits
  int64_t high = 2;
  while (high <= request.max_batch_limit && needed(high) <= memory_bytes) {
    low = high;
    high *= 2;
  }
  if (high > request.max_batch_limit) {
    high = request.max_batch_limit + 1;
    if (needed(request.max_batch_limit) <= memory_bytes) return request.max_batch_limit;
  }
  while (high - low > 1) {  // needed(low) fits, needed(high) does not
    const int64_t middle = low + (high - low) / 2;
    (needed(middle) <= memory_bytes ? low : high) = middle;
  }
  return low;
}

}  // namespace

ActivationEstimate estimate_policy_activations(const Architecture& arch, int64_t batch,
                                               Precision precision, const std::string& checkpoint,
                                               bool offload, Optimizer optimizer,
                                               const TensorLayout& layout) {
  const CheckpointPolicy policy = CheckpointPolicy::parse(checkpoint);
  ActivationInput input;
  input.layout = layout;
  input.arch = arch;
  input.batch = batch;
  input.precision = precision;
  input.offload = offload;
  input.optimizer = optimizer;
  ActivationEstimate worst;
  // Only a schedule changes with progress; sampling its range finds every plan it uses.
  const int samples = checkpoint.rfind("schedule", 0) == 0 ? 1000 : 1;
  for (int sample = 0; sample < samples; ++sample) {
    input.plan = policy.plan_for(arch.layers, static_cast<double>(sample) / samples);
    const ActivationEstimate each = estimate_activations(input);
    if (sample == 0 || each.peak_bytes > worst.peak_bytes) worst = each;
  }
  return worst;
}

namespace {

void validate_request(const EstimateRequest& request) {
  if (!request.arch && request.nominal_params <= 0) {
    throw InvalidInput("--model", "give a model (--model or shape flags) or a size (--params)");
  }
  if (request.batch <= 0) {
    throw InvalidInput("--batch", "must be positive, got " + std::to_string(request.batch));
  }
  CheckpointPolicy::parse(request.checkpoint);  // names --checkpoint when it cannot be read
  const TensorLayout& layout = request.layout;
  validate(layout);
  if (request.expert_ranks != 1 && !request.arch) {
    throw InvalidInput("--ep", "splits a model's experts: give its shape (--model)");
  }
  if (layout.split() && !request.arch) {
    throw InvalidInput("--tp", "splits a model's layers: give its shape (--model or shape flags)");
  }
  const ShardMode shard = parse_shard(request.shard);
  validate_shard_precision(shard, request.precision);
  if (shard == ShardMode::kParameters && !request.arch) {
    throw InvalidInput("--shard",
                       "parameters are gathered a unit at a time: give the model's "
                       "shape (--model or shape flags) to size the units");
  }
  if (layout.split() && request.nominal_params > 0) {
    throw InvalidInput("--params",
                       "is a whole model's size; split over --tp ranks every figure "
                       "is one rank's, counted from the shape: leave --params out");
  }
  if (request.world_size % layout.tp != 0) {
    throw InvalidInput("--tp", std::to_string(layout.tp) + " tensor ranks need a multiple of " +
                                   std::to_string(layout.tp) + " ranks in all, got --nproc " +
                                   std::to_string(request.world_size));
  }
  if (request.arch) {
    validate(*request.arch);
    validate(*request.arch, layout);
    // As `run` trains experts: whole on each rank, split by width over tensor ranks, or over
    // expert ranks (not both yet); not sharded as parameters.
    if (request.arch->moe.enabled() && shard == ShardMode::kParameters) {
      throw experts_layout_not_built("--shard");
    }
    // Before the ranks are counted, as `run` does: tensor ranks leave fewer data ranks, which is
    // not what is wrong.
    if (request.arch->moe.enabled() && request.expert_ranks > 1 && layout.split()) {
      throw InvalidInput("--tp", "does not combine with expert parallelism (--ep) yet");
    }
    // As `run` checks --ep (shard none: its expert ranks shard nothing yet).
    validate_expert_ranks(request.expert_ranks, request.arch->moe, request.world_size / layout.tp);
    if (request.expert_ranks > 1 && shard != ShardMode::kNone) {
      throw InvalidInput("--shard", "does not combine with expert parallelism (--ep) yet");
    }
    validate_expert_loads(request.arch->expert_rank_load, request.arch->expert_block_load,
                          request.arch->moe, request.expert_ranks);
    validate_expert_load(request.arch->expert_load, request.arch->moe);
    if (request.arch->lora.enabled()) {
      // As `run` trains adapters: on data ranks at most, the frozen base whole on each.
      if (layout.split()) {
        throw InvalidInput("--tp", "LoRA fine-tuning is not split over tensor ranks yet (" +
                                       setting("tp", "1") + ")");
      }
      if (shard == ShardMode::kParameters) {
        throw InvalidInput("--shard",
                           "LoRA shards what trains (optimizer, gradients); the frozen base "
                           "stays whole on every rank, not sharded as parameters");
      }
      if (request.arch->lora.base == BasePrecision::kBf16 &&
          request.precision != Precision::kBf16) {
        throw InvalidInput("--base-precision",
                           "a bf16 base needs bf16 matmuls: give " + setting("precision", "bf16"));
      }
    }
  }
}

}  // namespace

Estimate make_estimate(const EstimateRequest& request) {
  validate_request(request);
  Estimate estimate;
  estimate.request = request;
  if (estimate.request.device_memories.empty())
    estimate.request.device_memories = default_memories();
  const CheckpointPolicy policy = CheckpointPolicy::parse(request.checkpoint);
  const TensorLayout& layout = request.layout;
  if (estimate.request.arch) estimate.request.arch->expert_ranks = request.expert_ranks;
  if (request.arch) {
    const Architecture& arch = *estimate.request.arch;
    estimate.architecture_params = parameter_count(arch);
    estimate.activations =
        estimate_policy_activations(arch, request.batch, request.precision, request.checkpoint,
                                    request.offload, request.optimizer, layout);
    ActivationInput input;
    input.arch = arch;
    input.batch = request.batch;
    input.precision = request.precision;
    input.offload = request.offload;
    input.optimizer = request.optimizer;
    input.layout = layout;
    int64_t best_peak = 0;
    estimate.best_interval = best_interval(input, &best_peak);
    estimate.best_interval_peak_bytes = best_peak;
    const CheckpointPlan plan = policy.plan_for(arch.layers, 0.0);
    estimate.flops = step_flops(arch, request.batch * arch.seq_len, plan);
    estimate.rank_flops = rank_step_flops(arch, request.batch * arch.seq_len, plan, layout.tp,
                                          layout.sequence_parallel);
  }
  estimate.params =
      request.nominal_params > 0 ? request.nominal_params : *estimate.architecture_params;
  estimate.rank_params = layout.split() ? rank_parameter_count(*request.arch, layout.tp)
                         : request.expert_ranks > 1
                             ? expert_rank_parameter_count(*request.arch, request.expert_ranks)
                             : estimate.params;
  const bool fine_tuning = request.arch && request.arch->lora.enabled();
  // (A frozen base's bytes are weights, which only a parameter shard divides: LoRA refuses it.)
  estimate.states = per_rank_model_states(
      fine_tuning ? fine_tuning_state_bytes(*request.arch, request.precision, request.optimizer)
                  : model_state_bytes(estimate.rank_params, request.precision, request.optimizer),
      request.world_size / layout.tp, request.shard);
  const bool fully_sharded = parse_shard(request.shard) == ShardMode::kParameters;
  if (fully_sharded && request.arch) {
    estimate.gathered_bytes = gathered_unit_bytes(*request.arch, request.precision, layout.tp);
  }
  // Only this layout keeps less than the weights it moves to the device whole.
  if (fully_sharded) estimate.build_bytes = model_build_bytes(estimate.rank_params);
  for (const int64_t memory : estimate.request.device_memories) {
    DeviceFit fit;
    fit.memory_bytes = memory;
    fit.needed_bytes = std::max(
        estimate.build_bytes,
        estimate.fixed_bytes() + (estimate.activations ? estimate.activations->peak_bytes : 0));
    fit.fits = fit.needed_bytes <= memory;
    if (request.arch) {
      fit.max_batch = max_batch(estimate, memory);
      FitQuestion question;
      question.arch = *estimate.request.arch;
      question.batch = request.batch;
      question.precision = request.precision;
      question.optimizer = request.optimizer;
      question.params = estimate.rank_params;
      question.layout = layout;
      question.world_size = request.world_size;
      question.shard = request.shard;
      question.expert_ranks = request.expert_ranks;
      question.best_interval = *estimate.best_interval;
      fit.advice = advise_fit(question, memory);
    }
    estimate.fits.push_back(fit);
  }
  return estimate;
}

namespace {

nlohmann::json fits_to_json(const std::vector<DeviceFit>& fits) {
  nlohmann::json json = nlohmann::json::array();
  for (const DeviceFit& fit : fits) {
    json.push_back(
        {{"memory_bytes", fit.memory_bytes},
         {"needed_bytes", fit.needed_bytes},
         {"fits", fit.fits},
         {"max_batch", fit.max_batch ? nlohmann::json(*fit.max_batch) : nlohmann::json(nullptr)},
         {"advice", fit.advice ? nlohmann::json{{"checkpoint", fit.advice->checkpoint},
                                                {"loss_chunks", fit.advice->loss_chunks},
                                                {"offload", fit.advice->offload},
                                                {"world_size", fit.advice->world_size},
                                                {"shard", fit.advice->shard},
                                                {"expert_ranks", fit.advice->expert_ranks},
                                                {"needed_bytes", fit.advice->needed_bytes}}
                               : nlohmann::json(nullptr)}});
  }
  return json;
}

// The shape an estimate counted (beside the request's settings).
void put_architecture(nlohmann::json& json, const Architecture& arch, int64_t batch) {
  json["layers"] = arch.layers;
  json["d_model"] = arch.d_model;
  json["heads"] = arch.heads;
  json["kv_heads"] = arch.kv_heads;
  json["head_dim"] = arch.head_dim();
  json["mlp_hidden"] = arch.mlp_hidden;
  json["gated_mlp"] = arch.gated_mlp;
  if (arch.moe.enabled()) {
    json["experts"] = arch.moe.experts;
    json["experts_per_token"] = arch.moe.experts_per_token;
    json["expert_hidden"] = arch.expert_hidden;
    json["shared_expert_hidden"] = arch.moe.shared_expert_hidden;
    json["active_params"] = active_parameter_count(arch);
  }
  json["seq_len"] = arch.seq_len;
  json["vocab"] = arch.vocab;
  json["attention"] = to_string(arch.attention);
  json["sliding_window"] = arch.sliding_window;
  json["tokens_per_step"] = batch * arch.seq_len;
  put_fine_tuning(json, arch.lora);
}

}  // namespace

nlohmann::json to_json(const Estimate& estimate) {
  const EstimateRequest& request = estimate.request;
  auto optional = [](const auto& value) {
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
  };
  nlohmann::json json = {
      {"model", request.arch ? nlohmann::json(request.arch->name) : nlohmann::json(nullptr)},
      {"params", estimate.params},
      {"architecture_params", optional(estimate.architecture_params)},
      {"nominal_params", request.nominal_params > 0 ? nlohmann::json(request.nominal_params)
                                                    : nlohmann::json(nullptr)},
      {"precision", to_string(request.precision)},
      {"optimizer", to_string(request.optimizer)},
      {"checkpoint", request.checkpoint},
      {"offload", request.offload},
      {"batch", request.batch},
      {"world_size", request.world_size},
      {"shard", request.shard},
      {"tp", request.layout.tp},
      {"sequence_parallel", request.layout.sequence_parallel},
      {"ep", request.expert_ranks},
      {"expert_rank_load", request.arch ? request.arch->expert_rank_load : 1.0},
      {"expert_block_load", request.arch ? request.arch->busiest_block_load() : 1.0},
      {"expert_load", request.arch ? request.arch->expert_load : 1.0},
      {"rank_params", estimate.rank_params},
      {"trainable_params",
       request.arch ? trainable_parameter_count(*request.arch) : estimate.params},
      {"weights_bytes", estimate.states.weights},
      {"master_bytes", estimate.states.master},
      {"gradients_bytes", estimate.states.gradients},
      {"optimizer_bytes", estimate.states.optimizer},
      {"model_state_bytes", estimate.states.total()},
      {"gathered_bytes", estimate.gathered_bytes},
      {"build_bytes", estimate.build_bytes},
  };
  if (request.arch) put_architecture(json, *request.arch, request.batch);
  if (estimate.activations) {
    const ActivationEstimate& act = *estimate.activations;
    json["activation_saved_bytes"] = act.saved_bytes;
    json["activation_peak_bytes"] = act.peak_bytes;
    json["activation_peak_phase"] = act.peak_phase;
    json["literature_layer_bytes"] = act.literature_layer_bytes;
    json["literature_activation_bytes"] = act.literature_bytes;
    json["total_bytes"] = estimate.fixed_bytes() + act.peak_bytes;
  } else {
    json["activation_peak_bytes"] = nullptr;
    json["total_bytes"] = estimate.fixed_bytes();
  }
  json["best_interval"] = optional(estimate.best_interval);
  json["best_interval_peak_bytes"] = optional(estimate.best_interval_peak_bytes);
  json["model_flops"] =
      estimate.flops ? nlohmann::json(estimate.flops->model) : nlohmann::json(nullptr);
  json["hardware_flops"] =
      estimate.flops ? nlohmann::json(estimate.flops->hardware) : nlohmann::json(nullptr);
  json["rank_model_flops"] =
      estimate.rank_flops ? nlohmann::json(estimate.rank_flops->model) : nlohmann::json(nullptr);
  json["rank_hardware_flops"] =
      estimate.rank_flops ? nlohmann::json(estimate.rank_flops->hardware) : nlohmann::json(nullptr);
  json["devices"] = fits_to_json(estimate.fits);
  return json;
}

void put_fine_tuning(nlohmann::json& json, const LoraOptions& lora) {
  json["finetune"] = lora.enabled() ? "lora" : "full";
  if (!lora.enabled()) return;
  json["lora_rank"] = lora.rank;
  json["lora_alpha"] = lora.alpha;
  json["lora_targets"] = lora_targets_text(lora.targets);
  json["base_precision"] = to_string(lora.base);
}

}  // namespace rematlab::estimate
