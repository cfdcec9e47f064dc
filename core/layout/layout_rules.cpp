#include "layout/layout_rules.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "checkpoint/checkpoint_policy.h"
#include "checkpoint/stage_blocks.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "layout/stage_policies.h"
#include "run/expert_loads.h"
#include "run/pipeline_config.h"
#include "run/run_config.h"

namespace rematlab::layout {
namespace {

// The planner counts bytes in 64 bits: one micro-batch's activations through the whole unsplit
// model under 16 PiB keep every sum it forms far inside that range (require_countable).
constexpr double kMaxActivationBytes = 0x1p54;

std::string degree(const char* name, int64_t value) {
  return std::string(name) + " " + std::to_string(value);
}

void require_positive(const std::optional<int64_t>& value, const char* flag) {
  if (value && *value < 1)
    throw InvalidInput(flag, "must be at least 1, got " + std::to_string(*value));
}

}  // namespace

std::string engine_pipeline_lack(const Layout& layout) {
  if (layout.pp == 1) return "";
  if (layout.accum < layout.pp) return "fewer micro-batches than pipeline stages";
  if (layout.offload != Offload::kNone) return "offload on pipeline stages";
  if (layout.zero == 3 && layout.dp > 1) return "sharded parameters (ZeRO 3) on pipeline stages";
  return "";
}

std::string engine_experts_lack(const LayoutRequest& request, const Layout& layout) {
  if (!request.arch.moe.enabled()) return "";
  if (layout.pp > 1) return "experts on pipeline stages";
  if (layout.zero == 3 && layout.dp > 1) return "experts sharded as parameters (ZeRO 3)";
  if (layout.ep > 1 && layout.zero > 0) return "sharded model states with expert parallelism";
  return "";
}

std::vector<int64_t> rule_split(int64_t layers, int64_t pp, int64_t vp) {
  const std::vector<int64_t> bounds = stage_block_bounds(layers, pp * vp);
  std::vector<int64_t> split;
  for (std::size_t chunk = 0; chunk + 1 < bounds.size(); ++chunk) {
    split.push_back(bounds[chunk + 1] - bounds[chunk]);
  }
  return split;
}

std::vector<std::vector<int64_t>> chunks_by_rank(const std::vector<int64_t>& split, int64_t pp) {
  // As the engine places them: chunk c on rank c mod P.
  std::vector<std::vector<int64_t>> by_rank(static_cast<size_t>(pp));
  for (std::size_t chunk = 0; chunk < split.size(); ++chunk) {
    by_rank[chunk % static_cast<size_t>(pp)].push_back(split[chunk]);
  }
  return by_rank;
}

int64_t countable_micro_batch(const LayoutRequest& request) {
  // An upper bound on one sequence's activations: every block's tensors, under math attention
  // the s×s scores of every head, and the head's logits, nothing split or recomputed.
  const estimate::Architecture& arch = request.arch;
  const double s = static_cast<double>(arch.seq_len);
  const double scores =
      arch.attention == AttentionKind::kMath ? 6.0 * static_cast<double>(arch.heads) * s : 0.0;
  const double per_token_layer = 4.0 * (48.0 * static_cast<double>(arch.d_model) +
                                        8.0 * static_cast<double>(arch.mlp_hidden) + scores);
  const double per_sequence = s * (static_cast<double>(arch.layers) * per_token_layer +
                                   12.0 * static_cast<double>(arch.vocab));
  return static_cast<int64_t>(std::min(std::floor(kMaxActivationBytes / per_sequence),
                                       static_cast<double>(kMaxStepTokens)));
}

int64_t padded_vocab(int64_t vocab, int64_t tp) {
  const int64_t multiple = 128 * tp;
  return (vocab + multiple - 1) / multiple * multiple;
}

namespace {

// Whether each stage's policy is one the search weighs, the same for all its chunks: what ZeRO
// 3's gathers (counted per every:K) and Korthikanti et al.'s terms are modelled under.
bool one_searched_policy_a_stage(const std::vector<std::string>& rank_policies) {
  return std::all_of(rank_policies.begin(), rank_policies.end(), [](const std::string& policy) {
    return policy.find('/') == std::string::npos &&
           is_searched_policy(CheckpointPolicy::parse(policy));
  });
}

std::string zero3_untimed(const std::string& policies) {
  return "ZeRO 3's gathers are timed under one of none, selective and every:K a stage, not " +
         policies;
}

}  // namespace

std::string structural_problem(const LayoutRequest& request, const Layout& layout) {
  const estimate::Architecture& arch = request.arch;
  const Cluster& cluster = request.cluster;
  const int64_t model_ranks = layout.tp * layout.pp * layout.cp;
  if (layout.dp < 1) {
    return degree("TP", layout.tp) + " × " + degree("PP", layout.pp) + " × " +
           degree("CP", layout.cp) + " does not divide " + std::to_string(cluster.gpus) + " GPUs";
  }
  if (model_ranks * layout.dp != cluster.gpus) {
    return degree("TP", layout.tp) + " × " + degree("PP", layout.pp) + " × " +
           degree("CP", layout.cp) + " × " + degree("DP", layout.dp) + " is not " +
           std::to_string(cluster.gpus) + " GPUs";
  }
  if (layout.tp > cluster.node_gpus() || cluster.node_gpus() % layout.tp != 0) {
    return degree("TP", layout.tp) + " does not fit inside a node of " +
           std::to_string(cluster.node_gpus()) + " GPUs";
  }
  if (arch.heads % layout.tp != 0) {
    return degree("TP", layout.tp) + " does not divide " + std::to_string(arch.heads) + " heads";
  }
  if (arch.kv_heads % layout.tp != 0 && layout.tp % arch.kv_heads != 0) {
    return degree("TP", layout.tp) + " can neither split nor share " +
           std::to_string(arch.kv_heads) + " key/value heads";
  }
  // A mixture's MLP is its experts (and a shared expert), each split by width.
  const int64_t mlp_width = arch.moe.enabled() ? arch.expert_hidden : arch.mlp_hidden;
  if (mlp_width % layout.tp != 0) {
    return degree("TP", layout.tp) + " does not divide the " +
           (arch.moe.enabled() ? "experts' width " : "MLP width ") + std::to_string(mlp_width);
  }
  if (arch.moe.shared_expert_hidden % layout.tp != 0) {
    return degree("TP", layout.tp) + " does not divide the shared expert's width " +
           std::to_string(arch.moe.shared_expert_hidden);
  }
  if (layout.sp && layout.tp == 1) return "sequence parallelism needs TP 2 or more";
  if (layout.pp > arch.layers) {
    return degree("PP", layout.pp) + " is more stages than " + std::to_string(arch.layers) +
           " layers";
  }
  if (layout.vp > 1) {
    if (layout.pp == 1) return "virtual stages need PP 2 or more";
    if (layout.pp * layout.vp > arch.layers) {
      return degree("PP", layout.pp) + " × " + std::to_string(layout.vp) +
             " virtual stages is more chunks than " + std::to_string(arch.layers) + " layers";
    }
    if (layout.accum % layout.pp != 0) {
      return "the interleaved schedule needs micro-batches (" + std::to_string(layout.accum) +
             ") in multiples of " + degree("PP", layout.pp);
    }
  }
  if (layout.cp > 1 && arch.seq_len % (2 * layout.cp) != 0) {
    return degree("CP", layout.cp) + " cannot split " + std::to_string(arch.seq_len) +
           " tokens into 2 · CP balanced chunks";
  }
  const int64_t local_tokens = arch.seq_len / layout.cp;
  if (layout.sp && local_tokens % layout.tp != 0) {
    return degree("TP", layout.tp) + " cannot split " + std::to_string(local_tokens) +
           " tokens per rank for sequence parallelism";
  }
  // Divided, not multiplied: micro-batch × DP may pass 64 bits (both are bounded on their own).
  if (request.global_batch % layout.dp != 0 ||
      (request.global_batch / layout.dp) % layout.micro_batch != 0) {
    return "global batch " + std::to_string(request.global_batch) + " is not a multiple of " +
           "micro-batch " + std::to_string(layout.micro_batch) + " × " + degree("DP", layout.dp);
  }
  if (layout.zero < 0 || layout.zero > 3) return "ZeRO stage must be 0 to 3";
  if (layout.offload == Offload::kParameters && layout.zero != 3) {
    return "offloading parameters needs ZeRO 3";
  }
  if (layout.offload == Offload::kOptimizer && layout.zero < 1) {
    return "offloading the optimizer needs ZeRO 1 or more";
  }
  if (layout.zero == 3 && !one_searched_policy_a_stage(layout.stage_checkpoints)) {
    return zero3_untimed(layout.checkpoint_text());
  }
  const std::string experts = experts_problem(request, layout);
  return !experts.empty() || !arch.lora.enabled() ? experts : fine_tuning_problem(layout);
}

std::string experts_problem(const LayoutRequest& request, const Layout& layout) {
  const MoeOptions& moe = request.arch.moe;
  if (layout.ep < 1) return degree("EP", layout.ep) + " is not a degree";
  if (!moe.enabled()) return layout.ep > 1 ? "expert parallelism needs a mixture of experts" : "";
  // Over tensor ranks each expert is split by width, as the engine splits it (Megatron-LM's
  // expert tensor parallelism at the tensor ranks' size); expert ranks beside them are not
  // modelled yet.
  if (layout.tp > 1 && layout.ep > 1) {
    return "experts split over tensor and expert ranks at once are not modelled: EP 1 with TP " +
           std::to_string(layout.tp);
  }
  if (moe.experts % layout.ep != 0) {
    return degree("EP", layout.ep) + " does not divide " + std::to_string(moe.experts) + " experts";
  }
  // Megatron-LM's expert groups fold the context ranks in with the data ranks.
  if ((layout.dp * layout.cp) % layout.ep != 0) {
    return degree("EP", layout.ep) + " does not divide the " +
           std::to_string(layout.dp * layout.cp) + " data × context ranks";
  }
  return "";
}

std::string fine_tuning_problem(const Layout& layout) {
  // As the engine and the estimator train adapters: on data ranks and pipeline stages, the
  // frozen base whole on every data rank.
  if (layout.tp > 1) return "LoRA is not modelled over tensor ranks: TP 1 only";
  if (layout.cp > 1) return "LoRA is not modelled over context ranks: CP 1 only";
  if (layout.zero == 3 || layout.offload == Offload::kParameters) {
    return "LoRA keeps the frozen base whole on every data rank: ZeRO 1 or 2 shards what trains";
  }
  return "";
}

namespace {

void require_between(int64_t value, int64_t low, int64_t high, const char* flag) {
  if (value < low || value > high) {
    throw InvalidInput(flag, "must be between " + std::to_string(low) + " and " +
                                 std::to_string(high) + ", got " + std::to_string(value));
  }
}

// Model states under 1 PiB and activations under kMaxActivationBytes keep every sum the planner
// forms inside 64 bits: a stage's chunks in flight hold at most about three models' worth
// (2^56), and a GPU's host bytes are its offloaded states (2^50) and checkpoint inputs (a small
// share of the activations), so 1024 GPUs' worth per node stays under 2^63. Both bounds are
// far beyond what any cluster holds.
constexpr double kMaxStateBytes = 0x1p50;

void require_countable(const LayoutRequest& request) {
  const double states = static_cast<double>(estimate::parameter_count(request.arch)) * 20.0;
  if (states > kMaxStateBytes) {
    throw InvalidInput("--model", "a shape of " + format_bytes(static_cast<int64_t>(states)) +
                                      " of model states is beyond what the planner counts");
  }
  const int64_t most = countable_micro_batch(request);
  const int64_t asked = request.fixed.micro_batch.value_or(1);
  if (asked > most) {
    throw InvalidInput(most < 1 ? "--seq-len" : "--micro-batch",
                       "micro-batches of " + std::to_string(asked) + " × " +
                           std::to_string(request.arch.seq_len) +
                           " tokens through this shape are beyond what the planner counts");
  }
}

// Each GPU figure a real device could have: finite, and not so small that a step never ends.
void require_device_figures(const GpuKind& gpu) {
  auto at_least = [](double value, double floor, const char* flag, const char* what) {
    if (!(std::isfinite(value) && value >= floor)) {
      throw InvalidInput(flag, std::string("must be at least ") + what);
    }
  };
  at_least(gpu.peak_bf16, 1e9, "--peak-flops", "1e9 FLOP/s");
  at_least(gpu.peak_fp32, 1e9, "--peak-flops", "1e9 FLOP/s");
  at_least(gpu.intra_node_bandwidth, 1e6, "--intra-node-bandwidth", "1e6 bytes/s");
  at_least(gpu.inter_node_bandwidth, 1e6, "--inter-node-bandwidth", "1e6 bytes/s");
  at_least(gpu.host_link_bandwidth, 1e6, "--gpu", "1e6 bytes/s over its host link");
  at_least(gpu.memory_bandwidth, 1e6, "--gpu", "1e6 bytes/s of memory bandwidth");
}

// A --pp-split list beside a fixed pipeline of two stages or more (balanced applies to every
// pipeline searched, but not to none); a list's length, a multiple of the stages, sets the
// chunks per stage where --virtual-stages does not, and it is checked as run checks it.
void validate_split(const LayoutRequest& request) {
  const FixedDimensions& fixed = request.fixed;
  if (fixed.pp_split.empty() && !fixed.pp_split_balanced) return;
  if (fixed.pp_split_balanced && !(fixed.pp && *fixed.pp == 1)) return;
  if (!fixed.pp || *fixed.pp < 2) {
    throw InvalidInput("--pp-split", "splits the blocks between pipeline stages: give " +
                                         setting("pp", "2") + " or more beside it");
  }
  const std::vector<int64_t>& split = fixed.pp_split;
  if (split.empty()) return;
  const int64_t pp = *fixed.pp;
  const auto counts = static_cast<int64_t>(split.size());
  if (!fixed.vp && counts % pp != 0) {
    throw InvalidInput("--pp-split", "gives " + std::to_string(counts) + " block counts for " +
                                         pipeline_chunks_text(pp, 1) +
                                         ": give one for each chunk, a multiple of the stages");
  }
  validate_split_counts(split, pp, fixed.vp.value_or(counts / pp), request.arch.layers);
}

// Each fixed degree against what it splits, before any search: one line naming the flag.
void validate_fixed(const LayoutRequest& request) {
  const estimate::Architecture& arch = request.arch;
  const Cluster& cluster = request.cluster;
  const FixedDimensions& fixed = request.fixed;
  auto divides_gpus = [&](const std::optional<int64_t>& degree, const char* flag) {
    if (!degree) return;
    require_between(*degree, 1, cluster.gpus, flag);
    if (cluster.gpus % *degree != 0) {
      throw InvalidInput(flag, std::to_string(*degree) + " does not divide " +
                                   std::to_string(cluster.gpus) + " GPUs");
    }
  };
  divides_gpus(fixed.tp, "--tp");
  divides_gpus(fixed.pp, "--pp");
  divides_gpus(fixed.cp, "--cp");
  divides_gpus(fixed.dp, "--dp");
  if (fixed.tp) {
    Layout probe;
    probe.tp = *fixed.tp;
    probe.dp = cluster.gpus / *fixed.tp;
    probe.micro_batch = 1;
    const std::string problem = structural_problem(request, probe);
    if (problem.find("TP") != std::string::npos) throw InvalidInput("--tp", problem);
  }
  if (fixed.pp && *fixed.pp > arch.layers) {
    throw InvalidInput("--pp", std::to_string(*fixed.pp) + " stages are more than " +
                                   std::to_string(arch.layers) + " layers");
  }
  if (fixed.vp) {
    require_between(*fixed.vp, 1, arch.layers, "--virtual-stages");
    if (*fixed.vp > 1 && fixed.pp && (*fixed.pp == 1 || *fixed.pp * *fixed.vp > arch.layers)) {
      throw InvalidInput("--virtual-stages",
                         std::to_string(*fixed.vp) + " chunks per stage need PP 2 or more and " +
                             "no more chunks than the " + std::to_string(arch.layers) + " layers");
    }
  }
  validate_split(request);
  if (fixed.cp && *fixed.cp > 1 && arch.seq_len % (2 * *fixed.cp) != 0) {
    throw InvalidInput("--cp", std::to_string(*fixed.cp) + " context ranks cannot split " +
                                   std::to_string(arch.seq_len) + " tokens into 2 · CP chunks");
  }
  if (fixed.micro_batch) {
    require_between(*fixed.micro_batch, 1, request.global_batch, "--micro-batch");
    if (request.global_batch % *fixed.micro_batch != 0) {
      throw InvalidInput("--micro-batch", std::to_string(*fixed.micro_batch) +
                                              " does not divide the global batch " +
                                              std::to_string(request.global_batch));
    }
  }
  if (request.engine_only) {
    const bool beyond =
        (fixed.cp && *fixed.cp > 1) || (fixed.offload && (*fixed.offload == Offload::kOptimizer ||
                                                          *fixed.offload == Offload::kParameters));
    if (beyond) {
      throw InvalidInput("--runnable-here",
                         "contradicts a fixed context split or model-state offload, "
                         "which RematLab's engine does not run");
    }
  }
}

// A policy the search does not weigh (sublayer strides, a segment list, one per model chunk)
// names blocks of each chunk: the chunks must be known, so the pipeline's degree and chunks are
// fixed with it and its split is the rule's or a list.
void validate_checkpoint(const LayoutRequest& request) {
  const FixedDimensions& fixed = request.fixed;
  if (!fixed.checkpoint || is_searched_policy(CheckpointPolicy::parse(*fixed.checkpoint))) return;
  const std::string& text = *fixed.checkpoint;
  // What no chunk of blocks could take, said before what the degrees lack.
  const CheckpointPolicy policy = CheckpointPolicy::parse(text);
  for (const CheckpointPolicy& chunk : policy.stages()) evaluated_policy(chunk, text);
  if (policy.kind() != CheckpointPolicy::Kind::kStages) evaluated_policy(policy, text);
  const int64_t pp = fixed.pp.value_or(0);
  const auto listed = static_cast<int64_t>(fixed.pp_split.size());
  if (pp < 1 || (pp > 1 && !fixed.vp && listed == 0)) {
    throw InvalidInput("--checkpoint", text +
                                           " names blocks of each pipeline chunk: give --pp and "
                                           "--virtual-stages with it");
  }
  if (fixed.pp_split_balanced) {
    throw InvalidInput("--checkpoint", text +
                                           " names blocks of chunks --pp-split balanced has not "
                                           "split yet: give the split as a list");
  }
  const int64_t vp = listed > 0 ? listed / pp : fixed.vp.value_or(1);
  const std::vector<int64_t> split =
      listed > 0 ? fixed.pp_split : rule_split(request.arch.layers, pp, vp);
  const std::vector<std::string> policies = rank_policies(text, pp, vp, split);
  check_named_blocks(policies, split, pp);
  if (!one_searched_policy_a_stage(policies)) {
    if (fixed.zero && *fixed.zero == 3) throw InvalidInput("--zero", zero3_untimed(text));
    if (request.activation_model == ActivationModel::kMegatron) {
      throw InvalidInput("--checkpoint",
                         "Korthikanti et al.'s per-layer terms weigh none, selective and every:K "
                         "(got " +
                             text + "; use --activation-model engine)");
    }
  }
}

// A mixture of experts' fixed degrees and its rank load (a run's, so at one EP degree).
void validate_experts(const LayoutRequest& request) {
  const FixedDimensions& fixed = request.fixed;
  const estimate::Architecture& arch = request.arch;
  if (arch.moe.enabled()) {
    // As the model refuses them (ModelConfig's validation, which a request built from a preset
    // in the window does not pass through).
    if (arch.lora.enabled()) {
      throw InvalidInput("--finetune", "adapters on experts are not built (train the model whole)");
    }
    if (fixed.tp && *fixed.tp > 1 && fixed.ep && *fixed.ep > 1) {
      Layout probe;
      probe.tp = *fixed.tp;
      probe.ep = *fixed.ep;
      throw InvalidInput("--tp", experts_problem(request, probe));
    }
    if (fixed.sp && *fixed.sp && fixed.ep && *fixed.ep > 1) {
      throw InvalidInput("--sequence-parallel",
                         "needs tensor ranks, and experts split over expert ranks (--ep) are "
                         "planned at TP 1");
    }
    if (request.activation_model == ActivationModel::kMegatron) {
      throw InvalidInput("--activation-model",
                         "Korthikanti et al.'s per-layer terms have no experts (use engine)");
    }
  }
  if (fixed.ep) {
    require_between(*fixed.ep, 1, request.cluster.gpus, "--ep");
    Layout probe;
    probe.ep = *fixed.ep;
    probe.dp = *fixed.ep;
    std::string problem = experts_problem(request, probe);
    // The data × context ranks fixed tensor and pipeline degrees leave (all of them when both
    // are fixed) must be split by it; degrees that do not divide the GPUs are their own flags'
    // problem (validate_fixed).
    const int64_t gpus = request.cluster.gpus;
    const int64_t tp = fixed.tp.value_or(1);
    const int64_t pp = fixed.pp.value_or(1);
    // Bounded before they multiply (validate_fixed checks them afterwards).
    const bool splits =
        tp >= 1 && pp >= 1 && tp <= gpus && pp <= gpus / tp && gpus % (tp * pp) == 0;
    if (problem.empty() && splits && (gpus / (tp * pp)) % *fixed.ep != 0) {
      problem = degree("EP", *fixed.ep) + " does not divide the " +
                std::to_string(gpus / (tp * pp)) + " data × context ranks left of " +
                std::to_string(gpus) + " GPUs";
    }
    // Fixed data and context degrees are the ranks it splits.
    const int64_t dp = fixed.dp.value_or(0);
    const int64_t cp = fixed.cp.value_or(0);
    if (problem.empty() && dp >= 1 && cp >= 1 && dp <= gpus && cp <= gpus / dp &&
        (dp * cp) % *fixed.ep != 0) {
      problem = degree("EP", *fixed.ep) + " does not divide the " + std::to_string(dp * cp) +
                " data × context ranks of --dp and --cp";
    }
    if (!problem.empty()) throw InvalidInput("--ep", problem);
  }
  if (!arch.moe.enabled()) return;
  for (const auto& [flag, load] :
       {std::pair{"--expert-rank-load", arch.expert_rank_load},
        std::pair{"--expert-block-load", arch.expert_block_load.value_or(1.0)}}) {
    if (load != 1.0 && (!fixed.ep || *fixed.ep < 2)) {
      throw InvalidInput(flag,
                         "is a load over expert ranks: give the --ep (2 or more) it was seen at");
    }
  }
  if (fixed.ep) {
    validate_expert_loads(arch.expert_rank_load, arch.expert_block_load, arch.moe, *fixed.ep);
  }
  validate_expert_load(arch.expert_load, arch.moe);
}

}  // namespace

void validate(const LayoutRequest& request) {
  const Cluster& cluster = request.cluster;
  require_between(cluster.gpus, 1, kMaxGpus, "--gpus");
  require_between(cluster.gpus_per_node, 1, kMaxGpusPerNode, "--gpus-per-node");
  if (cluster.gpus % cluster.gpus_per_node != 0 && cluster.gpus > cluster.gpus_per_node) {
    throw InvalidInput("--gpus", std::to_string(cluster.gpus) + " GPUs are not whole nodes of " +
                                     std::to_string(cluster.gpus_per_node));
  }
  if (cluster.gpu.memory_bytes <= 0) throw InvalidInput("--gpu-memory", "must be positive");
  require_device_figures(cluster.gpu);
  if (request.global_batch < 1) throw InvalidInput("--global-batch", "must be at least 1");
  if (request.global_batch > kMaxStepTokens / std::max<int64_t>(request.arch.seq_len, 1)) {
    throw InvalidInput("--global-batch",
                       "a step of more than 2^40 tokens is beyond what the "
                       "planner counts");
  }
  if (!(request.efficiency() >= LayoutRequest::kMinMatmulEfficiency &&
        request.efficiency() <= 1.0)) {
    throw InvalidInput("--efficiency", "must be a share of peak in [0.001, 1]");
  }
  if (!(request.fragmentation >= 0.0 && request.fragmentation < 1.0)) {
    throw InvalidInput("--fragmentation", "must be in [0, 1)");
  }
  if (request.top < 1) throw InvalidInput("--top", "must be at least 1");
  const FixedDimensions& fixed = request.fixed;
  require_positive(fixed.tp, "--tp");
  require_positive(fixed.pp, "--pp");
  require_positive(fixed.vp, "--virtual-stages");
  require_positive(fixed.cp, "--cp");
  require_positive(fixed.dp, "--dp");
  require_positive(fixed.micro_batch, "--micro-batch");
  if (fixed.zero && (*fixed.zero < 0 || *fixed.zero > 3)) {
    throw InvalidInput("--zero", "must be 0, 1, 2 or 3, got " + std::to_string(*fixed.zero));
  }
  if (request.arch.lora.enabled()) {
    if (request.arch.lora.base == BasePrecision::kBf16 && request.precision != Precision::kBf16) {
      throw InvalidInput("--base-precision",
                         "a bf16 base needs bf16 matmuls: give " + setting("precision", "bf16"));
    }
    if (fixed.sp && *fixed.sp) {
      throw InvalidInput("--sequence-parallel",
                         "LoRA is not modelled over tensor ranks, so not with sequence "
                         "parallelism");
    }
    if (request.activation_model == ActivationModel::kMegatron) {
      throw InvalidInput("--activation-model",
                         "Korthikanti et al.'s per-layer terms are full training's: a frozen "
                         "base keeps less (use engine)");
    }
    Layout asked;  // each fixed degree alone against what fine-tuning is modelled with
    asked.tp = fixed.tp.value_or(1);
    asked.cp = fixed.cp.value_or(1);
    asked.zero = fixed.zero.value_or(0);
    asked.offload = fixed.offload.value_or(Offload::kNone);
    const std::string problem = fine_tuning_problem(asked);
    if (!problem.empty()) {
      const char* flag = asked.tp > 1      ? "--tp"
                         : asked.cp > 1    ? "--cp"
                         : asked.zero == 3 ? "--zero"
                                           : "--offload";
      throw InvalidInput(flag, problem);
    }
  }
  validate_experts(request);
  validate_fixed(request);
  validate_checkpoint(request);
  require_countable(request);
}

}  // namespace rematlab::layout
