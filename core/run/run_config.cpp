#include "run/run_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "checkpoint/checkpoint_policy.h"
#include "checkpoint/stage_blocks.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "common/posix_files.h"
#include "run/pipeline_config.h"
#include "run/shard_mode.h"
#include "runtime/device.h"

namespace rematlab {

int64_t RunConfig::timed_warmup_steps() const {
  return std::max<int64_t>(0, std::min(warmup_steps, steps - 1));
}

std::vector<int64_t> RunConfig::chunk_bounds() const {
  return chunk_block_bounds(model.layers, pp * virtual_stages, pp_split);
}

int max_threads() {
  return std::max(16, 4 * static_cast<int>(std::thread::hardware_concurrency()));
}

PolicyAndOffload split_policy_and_offload(const std::string& text) {
  // The '+' before an offload mode: a '+' inside a policy ("every:+2", "schedule:0=1,+0.5=2",
  // as std::stod read numbers) is part of it.
  for (auto plus = text.find('+'); plus != std::string::npos; plus = text.find('+', plus + 1)) {
    const std::string rest = text.substr(plus + 1);
    if (rest == "none" || rest == "host" || rest == "disk" || rest.rfind("disk:", 0) == 0) {
      return {text.substr(0, plus), rest};
    }
  }
  return {text, std::nullopt};
}

namespace {

void validate_data_source(const std::string& data) {
  if (!files::is_valid_utf8(data)) throw InvalidInput("--data", "the path is not valid UTF-8");
  if (data.rfind("text:", 0) != 0) return;
  const std::string path = data.substr(5);
  if (!files::exists(path)) throw InvalidInput("--data", "no file '" + path + "'");
  if (files::is_directory(path)) throw InvalidInput("--data", "'" + path + "' is a folder");
  if (!files::readable(path)) throw InvalidInput("--data", "'" + path + "' cannot be read");
}

// The offload directory is created when the run starts; whether it can be is found out now, by
// making (and removing) a directory where it will go, so that a sweep refuses it before anything
// runs rather than recording every run failed.
void validate_offload_location(const OffloadSpec& offload) {
  if (offload.kind != OffloadKind::kDisk) return;
  const std::string folder =
      offload.directory.empty() ? files::temp_directory() : offload.directory;
  if (!files::is_valid_utf8(folder)) throw InvalidInput("--offload", "the path is not valid UTF-8");
  // The folder itself may be created, under the nearest one that exists.
  std::string existing = folder;
  while (!files::exists(existing) && existing != "." && existing != "/") {
    existing = files::parent_directory(existing);
  }
  if (!files::is_directory(existing)) {
    throw InvalidInput("--offload",
                       "cannot create '" + folder + "': '" + existing + "' is not a folder");
  }
  const std::string reason = files::probe_directory_creation(existing);
  if (!reason.empty()) {
    throw InvalidInput("--offload",
                       "cannot create an offload directory under '" + existing + "': " + reason);
  }
}

// Weights, gradients and AdamW's two moments are 16 bytes a parameter in fp32: a model whose
// states alone exceed the device's memory cannot take one step, so it is refused before it is
// built (building it would only hang the machine or die in the allocator). A rank keeps 1/T of
// them under tensor parallelism and shards them over its D data ranks as --shard says, but its
// part reaches the device whole before it is sharded (the split happens in host memory).
void validate_model_states_fit(const RunConfig& config, const c10::Device& device) {
  const ModelConfig& model = config.model;
  const double params = static_cast<double>(model.parameter_count());
  // A pipeline stage holds about 1/P of the blocks (more on the stages with the embedding and
  // head: this refuses only what cannot fit).
  const double tp = static_cast<double>(std::max<int64_t>(1, config.tp)) *
                    static_cast<double>(std::max<int64_t>(1, config.pp));
  const double data_ranks = static_cast<double>(config.data_ranks());
  double per_param = 16.0;  // weights 4, gradients 4, moments 8
  switch (parse_shard(config.shard)) {
    case ShardMode::kNone:
      break;
    case ShardMode::kOptimizer:
      per_param = 8.0 + 8.0 / data_ranks;
      break;
    case ShardMode::kGradients:
      per_param = 4.0 + 12.0 / data_ranks;
      break;
    case ShardMode::kParameters:
      per_param = 16.0 / data_ranks;
      break;
  }
  // Fine-tuning: a frozen base holds its weights only; the adapters train as a whole model does
  // (a stage holds about 1/P of both, as above).
  const ModelConfig& m = config.model;
  const double states = m.lora.enabled()
                            ? (static_cast<double>(m.frozen_base_bytes()) +
                               per_param * static_cast<double>(m.adapter_parameter_count())) /
                                  static_cast<double>(std::max<int64_t>(1, config.pp))
                            : std::max(4.0, per_param) * params / tp;
  const double memory = static_cast<double>(device_memory_bytes(device));
  if (memory > 0.0 && states > memory) {
    throw InvalidInput(
        "--preset", "this model's weights, gradients and optimizer state need " +
                        format_bytes(static_cast<int64_t>(states)) + " per rank, more than the " +
                        format_bytes(static_cast<int64_t>(memory)) + " of " + device.str() +
                        " (estimate --model … --device-memory sizes it)");
  }
  // plan: profiles the rank's part unsharded (parallel/ranks_profile.h).
  const double profiled =
      m.lora.enabled() ? states : 16.0 * params / tp;  // a LoRA run profiles what it trains
  if (memory > 0.0 && profiled > memory && CheckpointPolicy::parse(config.checkpoint).is_plan()) {
    throw InvalidInput("--checkpoint",
                       "plan: measures the rank's part of the model unsharded, whose weights, "
                       "gradients and optimizer state need " +
                           format_bytes(static_cast<int64_t>(profiled)) + ", more than the " +
                           format_bytes(static_cast<int64_t>(memory)) + " of " + device.str() +
                           "; give its plan as segments:…");
  }
}

void validate_data_parallel(const RunConfig& config) {
  if (config.world_size < 1 || config.world_size > kMaxWorldSize) {
    throw InvalidInput("--nproc", "must be between 1 and " + std::to_string(kMaxWorldSize) +
                                      ", got " + std::to_string(config.world_size));
  }
  const ShardMode shard = parse_shard(config.shard);
  if (config.bucket_bytes <= 0 || config.bucket_bytes > (int64_t{1} << 40)) {
    throw InvalidInput("--bucket-size", "must be between 1 byte and 1 TiB");
  }
  validate_shard_precision(shard, config.precision);
}

}  // namespace

void validate_tensor_split(const ModelConfig& model, int64_t tp, bool sequence_parallel) {
  auto divides = [tp](int64_t value, const std::string& what) {
    if (value % tp != 0) {
      throw InvalidInput("--tp", std::to_string(tp) + " tensor ranks cannot split " + what + " " +
                                     std::to_string(value) + " into equal parts");
    }
  };
  divides(model.heads, "heads");
  const int64_t kv = model.key_value_heads();
  if (kv % tp != 0 && tp % kv != 0) {
    throw InvalidInput("--tp", std::to_string(tp) + " tensor ranks can neither split nor share " +
                                   std::to_string(kv) +
                                   " key/value heads (one must divide the other)");
  }
  if (model.moe.enabled()) {  // every block's MLP is a mixture: its experts split by width
    divides(model.expert_width(), "the experts' width");
    if (model.moe.shared_expert_hidden > 0) {
      divides(model.moe.shared_expert_hidden, "the shared expert's width");
    }
  } else {
    divides(model.mlp_width(), "the MLP width");
  }
  divides(model.vocab, "the vocabulary");
  if (sequence_parallel) divides(model.seq_len, "the sequence length");
}

namespace {

// Tensor parallelism splits heads, key/value heads, the MLP's width and the vocabulary into
// equal parts: each must divide, and what it cannot do yet is refused before anything starts.
void validate_tensor_parallel(const RunConfig& config) {
  const int64_t tp = config.tp;
  if (tp < 1 || tp > kMaxWorldSize) {
    throw InvalidInput("--tp", "must be between 1 and " + std::to_string(kMaxWorldSize) + ", got " +
                                   std::to_string(tp));
  }
  if (tp == 1) {
    if (config.sequence_parallel) {
      throw InvalidInput("--sequence-parallel", "splits the sequence between tensor ranks: give " +
                                                    setting("tp", "2") + " or more");
    }
    return;
  }
  if (config.world_size % tp != 0) {
    throw InvalidInput("--tp", std::to_string(tp) + " tensor ranks need a multiple of " +
                                   std::to_string(tp) + " ranks in all, got " +
                                   setting("nproc", std::to_string(config.world_size)));
  }
  const ModelConfig& model = config.model;
  validate_tensor_split(model, tp, config.sequence_parallel);
  if (model.qk_norm) {
    // Each rank would form part of the norms' scale gradients, which nothing sums yet.
    throw InvalidInput("--tp",
                       "q/k norms (Qwen 3) split over tensor ranks are not built: run "
                       "them on one tensor rank (" +
                           setting("tp", "1") + ")");
  }
  // Inside a head- or sequence-sharded region each rank would draw its local mask from the
  // stream the tensor ranks share: the shards' masks would repeat one another.
  if (model.dropout > 0.0) {
    throw InvalidInput("--dropout",
                       "is not drawn per shard under tensor parallelism yet; train "
                       "with " +
                           setting("dropout", "0") + " (as every preset does)");
  }
}

// What a fine-tuned model trains with: its base's precision, and the layouts its adapters take.
void validate_fine_tuning(const RunConfig& config) {
  if (config.model.lora.base == BasePrecision::kBf16 && config.precision != Precision::kBf16) {
    throw InvalidInput("--base-precision",
                       "a bf16 base needs bf16 matmuls: give " + setting("precision", "bf16"));
  }
  // Data ranks average the adapters' gradients and may shard their optimizer state and
  // gradients; the frozen base stays whole on every rank.
  if (config.model.lora.enabled() && config.tp > 1) {
    throw InvalidInput(
        "--tp", "LoRA fine-tuning is not split over tensor ranks yet (" + setting("tp", "1") + ")");
  }
  if (config.model.lora.enabled() && parse_shard(config.shard) == ShardMode::kParameters) {
    throw InvalidInput("--shard",
                       "LoRA shards what trains (optimizer, gradients); the frozen base stays "
                       "whole on every rank, not sharded as parameters");
  }
}

// Expert parallelism: ep data ranks share each expert set, so ep divides the data ranks and the
// experts. Its all-to-all carries rows between data ranks only: tensor and pipeline ranks, and
// shards of the experts' states, do not combine with it yet.
// (Adapters on experts are refused with the model, before any layout.)
void validate_expert_parallel(const RunConfig& config) {
  if (config.ep > 1) {
    // A dense model has no experts to split, whatever else the layout has (as estimate and
    // layout say).
    if (!config.model.moe.enabled()) validate_expert_ranks(config.ep, config.model.moe, 1);
    // Before the ranks are counted: tensor or pipeline ranks leave fewer data ranks, which is
    // not what is wrong.
    const char* not_built = config.tp > 1 ? "--tp" : config.pp > 1 ? "--pp" : nullptr;
    // A plan's profile runs each block alone, where no exchange would meet its peers'.
    if (CheckpointPolicy::parse(config.checkpoint).is_plan()) not_built = "--checkpoint (plan)";
    if (parse_shard(config.shard) != ShardMode::kNone) not_built = "--shard";
    if (not_built != nullptr) {
      throw InvalidInput(not_built,
                         "does not combine with expert parallelism (--ep) yet: its "
                         "ranks split the experts of whole data ranks, each keeping its "
                         "experts' states whole");
    }
  }
  validate_expert_ranks(config.ep, config.model.moe, config.data_ranks());
}

// Experts train on one process or over data ranks, whole on each, split over expert ranks, or
// split by width over tensor ranks: splitting them over pipeline ranks, or sharding them as
// parameters, is not built yet.
void validate_experts_layout(const RunConfig& config) {
  validate_expert_parallel(config);
  if (!config.model.moe.enabled()) return;
  const char* not_built = nullptr;
  if (config.pp > 1) {
    not_built = "--pp";
  } else if (parse_shard(config.shard) == ShardMode::kParameters) {
    not_built = "--shard";
  }
  if (not_built != nullptr) {
    throw experts_layout_not_built(not_built);
  }
}

}  // namespace

void validate_expert_ranks(int64_t expert_ranks, const MoeOptions& moe, int64_t data_ranks) {
  const int64_t ep = expert_ranks;
  if (ep < 1 || ep > kMaxWorldSize) {
    throw InvalidInput("--ep", "must be between 1 and " + std::to_string(kMaxWorldSize) + ", got " +
                                   std::to_string(ep));
  }
  if (ep == 1) return;
  if (!moe.enabled()) {
    throw InvalidInput("--ep",
                       "splits a mixture of experts' experts; this model has none (give "
                       "--experts, or a Mixtral or Qwen MoE model)");
  }
  if (moe.experts % ep != 0) {
    throw InvalidInput("--ep", std::to_string(ep) + " expert ranks cannot split " +
                                   std::to_string(moe.experts) + " experts evenly");
  }
  if (data_ranks % ep != 0) {
    throw InvalidInput("--ep", std::to_string(ep) + " expert ranks need a multiple of " +
                                   std::to_string(ep) + " data ranks, got " +
                                   std::to_string(data_ranks) + " (--nproc)");
  }
}

std::vector<ExpertSplit> more_expert_splits(int64_t experts, int64_t expert_ranks,
                                            int64_t world_size, int64_t max_ranks) {
  std::vector<ExpertSplit> more;
  // A hand-edited record's counts are no run's: nothing (and no overflow counting past them).
  if (expert_ranks < 1 || expert_ranks >= experts || experts > kMaxExperts || world_size < 1 ||
      world_size > max_ranks) {
    return more;
  }
  for (int64_t split = expert_ranks + 1; split <= experts; ++split) {
    if (experts % split != 0) continue;
    const int64_t ranks = (world_size + split - 1) / split * split;
    if (ranks <= max_ranks) more.push_back({ranks, split});
  }
  std::stable_sort(more.begin(), more.end(),
                   [](const ExpertSplit& a, const ExpertSplit& b) { return a.ranks < b.ranks; });
  return more;
}

InvalidInput experts_layout_not_built(const std::string& flag) {
  return InvalidInput(flag,
                      "a mixture of experts trains over data ranks (whole on each, or split "
                      "over them with --ep; optimizer state and gradients may be sharded without "
                      "--ep) and tensor ranks (each expert split by width, without --ep) for "
                      "now; this layout of it is not built yet");
}

void validate_shard_precision(ShardMode shard, Precision precision) {
  if (shard == ShardMode::kGradients && precision == Precision::kFp16) {
    throw InvalidInput("--shard", "gradients cannot be sharded with fp16 loss scaling yet; use " +
                                      setting("shard", "optimizer") + " or bf16");
  }
  // Autocast keeps a 16-bit copy of every weight it casts (until forward ends, or saved for
  // backward), which would undo sharding them: gathering in 16 bits is not built yet.
  if (shard == ShardMode::kParameters && precision != Precision::kFp32) {
    throw InvalidInput("--shard",
                       "parameters are sharded in fp32 only for now (autocast would "
                       "keep 16-bit copies of the gathered weights); use " +
                           setting("precision", "fp32") + " or " + setting("shard", "gradients"));
  }
}

bool shard_trains_in(ShardMode shard, Precision precision) {
  try {
    validate_shard_precision(shard, precision);
    return true;
  } catch (const InvalidInput&) {
    return false;
  }
}

void validate(const RunConfig& config) {
  validate(config.model);
  auto positive = [](int64_t value, const char* flag) {
    if (value <= 0) throw InvalidInput(flag, "must be positive, got " + std::to_string(value));
  };
  auto at_most = [](int64_t value, int64_t limit, const char* flag) {
    if (value > limit) {
      throw InvalidInput(
          flag, std::to_string(value) + " is more than the limit of " + std::to_string(limit));
    }
  };
  positive(config.batch, "--batch");
  at_most(config.batch, kMaxBatch, "--batch");
  positive(config.accum, "--accum");
  at_most(config.accum, kMaxBatch, "--accum");
  positive(config.steps, "--steps");
  at_most(config.steps, kMaxSteps, "--steps");
  if (config.warmup_steps < 0) throw InvalidInput("--warmup-steps", "must not be negative");
  // A non-finite setting would be stored as nothing and read back as the default.
  if (!(std::isfinite(config.lr) && config.lr > 0.0)) {
    throw InvalidInput("--lr", "must be a positive number");
  }
  if (!std::isfinite(config.weight_decay) || config.weight_decay < 0.0) {
    throw InvalidInput("--weight-decay", "must be a number ≥ 0");
  }
  if (!std::isfinite(config.grad_clip) || config.grad_clip < 0.0) {
    throw InvalidInput("--grad-clip", "must be a number ≥ 0");
  }
  if (!std::isfinite(config.peak_flops) || config.peak_flops < 0.0) {
    throw InvalidInput("--peak-flops", "must be a positive number of FLOP/s");
  }
  if (config.threads < 0 || config.threads > max_threads()) {
    throw InvalidInput("--threads", "must be between 0 (LibTorch's default) and " +
                                        std::to_string(max_threads()) + ", got " +
                                        std::to_string(config.threads));
  }
  if (config.budget_bytes < 0) throw InvalidInput("--budget", "must be positive");
  if (!(std::isfinite(config.loss_scale) && config.loss_scale >= 1.0)) {
    throw InvalidInput("--loss-scale", "must be a number ≥ 1");
  }
  positive(config.loss_scale_growth_interval, "--loss-scale-growth-interval");
  const c10::Device device = parse_device(config.device);
  if (config.precision == Precision::kFp16 && !device.is_cuda()) {
    throw InvalidInput("--precision", "fp16 needs a CUDA device (on CPU use bf16)");
  }
  validate_model_states_fit(config, device);
  const CheckpointPolicy policy = CheckpointPolicy::parse(config.checkpoint);
  const OffloadSpec offload = parse_offload(config.offload);
  validate_data_source(config.data);
  validate_offload_location(offload);
  if (offload.kind == OffloadKind::kHost && !device.is_cuda()) {
    throw InvalidInput("--offload",
                       "host offload needs a CUDA device (moving CPU memory to host "
                       "memory saves nothing); use disk");
  }
  if (offload.kind != OffloadKind::kNone && policy.is_none()) {
    throw InvalidInput("--offload",
                       "offload moves the inputs that recomputed segments save; "
                       "choose a " +
                           setting("checkpoint") + " policy other than none");
  }
  validate_data_parallel(config);
  validate_experts_layout(config);  // before the splits' own checks, which name other limits
  validate_tensor_parallel(config);
  validate_pipeline(config);
  // A list must fit the model (a stages: policy's, each its chunk's blocks as the run splits
  // them, which validate_pipeline checked).
  if (!policy.is_plan()) policy.plan_for(config.model.layers, 0.0, config.pp_split);
  validate_fine_tuning(config);
}

OffloadSpec parse_offload(const std::string& text) {
  if (text == "none") return {OffloadKind::kNone, ""};
  if (text == "host") return {OffloadKind::kHost, ""};
  if (text == "disk") return {OffloadKind::kDisk, ""};
  if (text.rfind("disk:", 0) == 0 && text.size() > 5) return {OffloadKind::kDisk, text.substr(5)};
  throw InvalidInput("--offload",
                     "unknown offload '" + text + "' (use none, host, disk or disk:DIR)");
}

nlohmann::json shown_json(const RunConfig& config) {
  nlohmann::json json = to_json(config);
  json["pp"] = config.pp;
  json["virtual_stages"] = config.virtual_stages;
  json["ep"] = config.ep;
  return json;
}

namespace {

// A mixture of experts' settings, where it has experts or its preset has (a record of the preset
// made dense says "experts": 0).
void put_experts(nlohmann::json& json, const MoeOptions& moe, const ModelConfig* named) {
  if (!moe.enabled() && !(named && named->moe.enabled())) return;
  json["experts"] = moe.experts;
  if (!moe.enabled()) return;
  json["experts_per_token"] = moe.experts_per_token;
  json["expert_hidden"] = moe.expert_hidden;  // 0: the MLP width
  json["shared_expert_hidden"] = moe.shared_expert_hidden;
  json["expert_weights"] = expert_weights_text(moe.normalise_weights);
  json["balance_coefficient"] = moe.balance_coefficient;
  json["capacity_factor"] = moe.capacity_factor;
}

}  // namespace

nlohmann::json to_json(const RunConfig& config) {
  nlohmann::json json = {
      {"preset", config.preset},
      {"arch", to_string(config.model.family)},
      {"layers", config.model.layers},
      {"d_model", config.model.d_model},
      {"heads", config.model.heads},
      {"kv_heads", config.model.key_value_heads()},
      {"mlp_hidden", config.model.mlp_width()},
      {"seq_len", config.model.seq_len},
      {"vocab", config.model.vocab},
      {"dropout", config.model.dropout},
      {"attention", to_string(config.model.attention)},
      {"tie_head", config.model.tie_head},
      {"rope_theta", config.model.rope_theta},
      {"loss_chunks", config.model.loss_chunks == kAutoLossChunks
                          ? nlohmann::json("auto")
                          : nlohmann::json(config.model.loss_chunks)},
      {"batch", config.batch},
      {"accum", config.accum},
      {"steps", config.steps},
      {"warmup_steps", config.warmup_steps},
      {"lr", config.lr},
      {"weight_decay", config.weight_decay},
      {"grad_clip", config.grad_clip},
      {"seed", config.seed},
      {"threads", config.threads},
      {"precision", to_string(config.precision)},
      {"device", config.device},
      {"checkpoint", config.checkpoint},
      {"offload", config.offload},
      {"data", config.data},
      {"budget_bytes", config.budget_bytes},
      {"timeline", config.timeline},
      {"loss_scale", config.loss_scale},
      {"loss_scale_growth_interval", config.loss_scale_growth_interval},
      {"tf32", config.tf32},
      {"deterministic", config.deterministic},
      {"world_size", config.world_size},
      {"shard", config.shard},
      {"bucket_bytes", config.bucket_bytes},
      {"tp", config.tp},
      {"sequence_parallel", config.sequence_parallel},
  };
  // Only where set: other records stay as they were.
  if (config.pp > 1) json["pp"] = config.pp;
  if (config.ep > 1) json["ep"] = config.ep;
  if (config.virtual_stages > 1) json["virtual_stages"] = config.virtual_stages;
  // Balanced once the run began: the split it ran, which a run of this record repeats.
  if (!config.pp_split.empty()) {
    json["pp_split"] = config.pp_split;
  } else if (config.pp_split_balanced) {
    json["pp_split"] = kBalancedSplit;
  }
  // Only where they are set: every other model's record (and profile key) stays as it was.
  // (and where the preset has them otherwise, so that reading the record back, which starts
  // from the preset, gives this model: qwen2.5-7b with --qkv-bias false).
  const ModelConfig* named = find_model_preset(config.preset);
  if (config.model.qkv_bias || (named && named->qkv_bias)) json["qkv_bias"] = config.model.qkv_bias;
  if (config.model.qk_norm || (named && named->qk_norm)) json["qk_norm"] = config.model.qk_norm;
  if (config.model.head_width > 0 || (named && named->head_width > 0)) {
    json["head_dim"] = config.model.head_width;
  }
  if (config.model.sliding_window > 0 || (named && named->sliding_window > 0)) {
    json["sliding_window"] = config.model.sliding_window;
  }
  put_experts(json, config.model.moe, named);
  const LoraOptions& lora = config.model.lora;
  if (lora.enabled()) {
    json["finetune"] = "lora";
    json["lora_rank"] = lora.rank;
    json["lora_alpha"] = lora.alpha;
    json["lora_targets"] = lora_targets_text(lora.targets);
    if (lora.base != BasePrecision::kFp32) json["base_precision"] = to_string(lora.base);
  }
  return json;
}

std::string describe_model(const RunConfig& config) {
  const LoraOptions& lora = config.model.lora;
  return config.preset + " (" + std::to_string(config.model.layers) + "×" +
         std::to_string(config.model.d_model) + ", seq " + std::to_string(config.model.seq_len) +
         (lora.enabled() ? ", LoRA r" + std::to_string(lora.rank) : std::string()) + ")";
}

std::string describe_run(const RunConfig& config) {
  return describe_run(config, "b" + std::to_string(config.batch));
}

std::string describe_run(const RunConfig& config, const std::string& batch) {
  std::string text = config.model.family == ModelFamily::kLlama ? "llama " : "";
  const MoeOptions& moe = config.model.moe;
  if (moe.enabled()) {  // "moe 8/2": 8 experts, 2 a token
    text +=
        "moe " + std::to_string(moe.experts) + "/" + std::to_string(moe.experts_per_token) + " ";
  }
  text += config.checkpoint;
  if (config.offload != "none") text += "+" + config.offload;
  text += " " + batch;
  if (config.precision != Precision::kFp32) text += " " + to_string(config.precision);
  if (config.world_size > 1) text += " x" + std::to_string(config.world_size);
  if (config.tp > 1) text += " tp" + std::to_string(config.tp);
  if (config.sequence_parallel) text += " sp";
  if (config.pp > 1) text += " pp" + std::to_string(config.pp);
  // "pp2×2": each stage's chunks, beside the stages.
  if (config.virtual_stages > 1) text += "×" + std::to_string(config.virtual_stages);
  if (!config.pp_split.empty()) {
    text += " split";
    for (std::size_t i = 0; i < config.pp_split.size(); ++i) {
      text += (i == 0 ? " " : ",") + std::to_string(config.pp_split[i]);
    }
  }
  if (config.pp_split_balanced) text += config.pp_split.empty() ? " split balanced" : " balanced";
  if (config.ep > 1) text += " ep" + std::to_string(config.ep);
  if (config.shard != "none") text += " shard:" + config.shard;
  if (config.model.lora.enabled()) {
    text += " lora:r" + std::to_string(config.model.lora.rank);
    if (config.model.lora.base != BasePrecision::kFp32) {
      text += " " + to_string(config.model.lora.base);
    }
  }
  return text;
}

}  // namespace rematlab
