#include "layout/layout_evaluator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

#include "checkpoint/checkpoint_policy.h"
#include "common/byte_size.h"
#include "estimate/activation_memory.h"
#include "estimate/fine_tuning.h"
#include "estimate/flops.h"
#include "estimate/model_state.h"
#include "estimate/sharded_units.h"
#include "layout/collective_time.h"
#include "layout/elementwise_work.h"
#include "layout/layout_rules.h"
#include "layout/layout_states.h"
#include "layout/sharded_transfers.h"
#include "parallel/pipeline_schedule.h"
#include "run/run_config.h"

namespace rematlab::layout {
namespace {

// Key/value values per token one tensor rank holds (all of one head's when it shares them).
int64_t kv_rank_width(const estimate::Architecture& arch, int64_t tp) {
  return arch.kv_heads % tp == 0 ? arch.kv_dim() / tp : arch.head_dim();
}

// Why a layout's figures do not fit, in one line; empty when they do.
std::string shortfall(const LayoutRequest& request, const LayoutEvaluation& result) {
  const int64_t device = request.cluster.gpu.memory_bytes;
  const MemoryParts& memory = result.memory;
  const std::string where =
      " per GPU at " + layout_name(result.layout) + " over " + format_bytes(device);
  if (memory.total() > device) {
    const std::pair<const char*, int64_t> parts[] = {
        {"weights", memory.weights},         {"gradients", memory.gradients},
        {"master copy", memory.master},      {"optimizer state", memory.optimizer},
        {"activations", memory.activations}, {"buffers", memory.buffers}};
    const auto largest =
        *std::max_element(std::begin(parts), std::end(parts),
                          [](const auto& a, const auto& b) { return a.second < b.second; });
    if (largest.second > device) {
      return largest.first + (" " + format_bytes(largest.second)) + where + " (" +
             format_bytes(memory.total()) + " in all)";
    }
    return "needs " + format_bytes(memory.total()) + " (" + largest.first + " " +
           format_bytes(largest.second) + " the most)" + where;
  }
  const int64_t node_host = result.host_bytes * request.cluster.node_gpus();
  if (node_host > request.cluster.host_memory_bytes) {
    return "host memory " + format_bytes(node_host) + " per node at " + layout_name(result.layout) +
           " over " + format_bytes(request.cluster.host_memory_bytes);
  }
  return "";
}

}  // namespace

LayoutEvaluator::LayoutEvaluator(const LayoutRequest& request)
    : request_(request), elementwise_(block_elementwise_values(request.arch)) {}

LayoutEvaluator::ChunkActivations LayoutEvaluator::chunk_activations(const Layout& layout,
                                                                     int64_t chunk_layers,
                                                                     int64_t policy, bool embedding,
                                                                     bool head) {
  const bool offload = layout.offload == Offload::kActivations;
  const Key key{layout.tp, layout.sp, layout.cp, layout.micro_batch, chunk_layers, policy,
                embedding, head,      offload,   layout.ep};
  const auto found = activation_cache_.find(key);
  if (found != activation_cache_.end()) return found->second;

  estimate::Architecture arch = request_.arch;
  arch.layers = chunk_layers;
  arch.seq_len = request_.arch.seq_len / layout.cp;  // each context rank's tokens
  arch.input_trains = !embedding;  // a later chunk sends its input's gradient back
  arch.vocab = padded_vocab(arch.vocab, layout.tp);
  arch.expert_ranks = layout.ep;  // each expert's share of rows comes from its group's ranks
  const estimate::TensorLayout split{layout.tp, layout.sp};
  const int64_t value_bytes = estimate::bytes_per_value(request_.precision);
  const int64_t residual =
      layout.micro_batch * arch.seq_len * arch.d_model * value_bytes / (layout.sp ? layout.tp : 1);
  const CheckpointPlan& plan = this->plan(policy, chunk_layers);

  ChunkActivations figures;
  if (request_.activation_model == ActivationModel::kEngine) {
    estimate::ActivationInput input;
    input.arch = arch;
    input.batch = layout.micro_batch;
    input.precision = request_.precision;
    input.plan = plan;
    input.offload = offload;
    input.layout = split;
    input.embedding = embedding;
    input.head = head;
    const estimate::ActivationEstimate estimate = estimate::estimate_activations(input);
    figures.saved = estimate.saved_bytes;
    figures.peak = estimate.peak_bytes;
  } else {
    using estimate::LiteratureRecompute;
    auto layer = [&](LiteratureRecompute recompute) {
      return estimate::literature_layer_bytes(arch, layout.micro_batch, request_.precision, split,
                                              recompute);
    };
    if (plan.interval > 0) {
      const int64_t groups = (chunk_layers + plan.interval - 1) / plan.interval;
      figures.saved = groups * layer(LiteratureRecompute::kFull);
      figures.peak = figures.saved + plan.interval * layer(LiteratureRecompute::kNone);
    } else {
      figures.saved =
          chunk_layers * layer(plan.recompute_attention_core ? LiteratureRecompute::kSelective
                                                             : LiteratureRecompute::kNone);
      figures.peak = figures.saved;
    }
  }
  if (offload) figures.offloaded = plan.recomputed_segments() * residual;
  activation_cache_.emplace(key, figures);
  return figures;
}

estimate::StepFlops LayoutEvaluator::chunk_flops(const Layout& layout, int64_t chunk_layers,
                                                 int64_t policy, bool embedding, bool head) {
  const int64_t tokens = layout.micro_batch * request_.arch.seq_len / layout.cp;
  const FlopsKey key{layout.tp, layout.sp, tokens, chunk_layers, policy, embedding, head};
  const auto found = flops_cache_.find(key);
  if (found != flops_cache_.end()) return found->second;
  estimate::Architecture arch = request_.arch;
  arch.layers = chunk_layers;
  arch.vocab = head ? padded_vocab(arch.vocab, layout.tp) : 0;  // no head, no head's FLOPs
  arch.input_trains = !embedding;
  const estimate::StepFlops flops =
      estimate::rank_step_flops(arch, tokens, plan(policy, chunk_layers), layout.tp, layout.sp);
  flops_cache_.emplace(key, flops);
  return flops;
}

estimate::StepFlops LayoutEvaluator::stage_flops(const Layout& layout, const Stage& stage,
                                                 int64_t policy, StageWork& work) {
  estimate::StepFlops total;
  for (size_t chunk = 0; chunk < stage.chunks.size(); ++chunk) {
    const bool head = stage.head && chunk + 1 == stage.chunks.size();
    const bool embedding = stage.embedding && chunk == 0;
    const estimate::StepFlops flops =
        chunk_flops(layout, stage.chunks[chunk], chunk_policy(policy, chunk), embedding, head);
    total.model += flops.model;
    total.hardware += flops.hardware;
    work.forward_share.push_back(flops.forward);
    work.backward_share.push_back(flops.hardware - flops.forward);  // with the recomputation
  }
  for (size_t chunk = 0; chunk < stage.chunks.size(); ++chunk) {
    work.forward_share[chunk] /= total.hardware;
    work.backward_share[chunk] /= total.hardware;
  }
  return total;
}

LayoutEvaluator::StageWork LayoutEvaluator::make_stage_work(const Layout& layout,
                                                            const Stage& stage, int64_t policy) {
  const estimate::Architecture& arch = request_.arch;
  const Cluster& cluster = request_.cluster;
  const GpuKind& gpu = cluster.gpu;
  const int64_t w = estimate::bytes_per_value(request_.precision);
  StageWork work;
  set_chunk_activations(layout, stage, policy, work);

  // One micro-batch through the stage's chunks.
  const double speed = gpu.peak_flops(request_.precision) * request_.efficiency();
  const estimate::StepFlops flops = stage_flops(layout, stage, policy, work);
  work.compute_s = flops.model / speed;
  work.recompute_s = (flops.hardware - flops.model) / speed;
  // The share of the blocks' forward run again (every:K: all of it), with its collectives.
  work.rerun = rerun_share(policy, stage);
  const double rerun = work.rerun;
  const int64_t tokens = layout.micro_batch * arch.seq_len / layout.cp;
  const double activation_bytes = static_cast<double>(tokens * arch.d_model * w);
  const double layers = static_cast<double>(stage.layers);
  // The blocks' element-wise work by memory bandwidth: forward and backward (and the engine's
  // own copies around its tensor-parallel collectives where the request plans for it), and a
  // recomputed forward's with the recomputation.
  const double seconds_per_value =
      layers * static_cast<double>(tokens) * static_cast<double>(w) / gpu.memory_bandwidth;
  const double forward = rank_forward_values(elementwise_, layout.tp, layout.sp);
  double values = 3.0 * forward;
  if (request_.engine_only) {
    for (const bool again : {false, true}) {
      values += (again ? rerun : 1.0 - rerun) *
                (engine_collective_values(arch, layout.tp, layout.sp, again) +
                 engine_expert_values(arch, layout.ep, again));
    }
  }
  work.elementwise_s = values * seconds_per_value;
  work.recompute_s += rerun * forward * seconds_per_value;
  if (layout.sp) {
    // Per block: forward gathers the sequence before the attention's and the MLP's first
    // projections and reduce-scatters after their last; backward does the converse and gathers
    // the sequence again for those projections' weight gradients (RematLab's engine waits for
    // that gather; Megatron-LM overlaps it with the input gradient's matmul).
    const double collectives = (6.0 + 2.0 * rerun) + (4.0 + 2.0 * rerun);
    work.tensor_s =
        layers * collectives * all_gather_seconds(cluster, layout.tp, layout.tp, activation_bytes);
  } else {
    work.tensor_s = layers * (4.0 + 2.0 * rerun) *
                    all_reduce_seconds(cluster, layout.tp, layout.tp, activation_bytes);
  }
  if (layout.cp > 1) {
    const double kv_bytes =
        2.0 * layout.micro_batch * arch.seq_len * kv_rank_width(arch, layout.tp) * w;
    const double exchange = layers * (2.0 + rerun) *
                            all_gather_seconds(cluster, layout.cp, layout.tp * layout.cp, kv_bytes);
    const double core = gpu.overlaps_communication
                            ? layers * 3.0 * estimate::attention_core_flops_per_token(arch) /
                                  layout.tp * tokens / speed
                            : 0.0;
    work.context_s = std::max(0.0, exchange - core);  // ring attention overlaps the two
  }
  if (arch.moe.enabled() && layout.ep > 1) {
    add_expert_exchange(layout, static_cast<double>(tokens), layers, rerun, speed, work);
  }
  if (layout.pp > 1) {
    // Each chunk's activations to the next stage, and their gradients back.
    const int64_t span = layout.tp * layout.cp * layout.dp * layout.pp;
    const double bytes = activation_bytes / (layout.sp ? layout.tp : 1);
    work.pipeline_s = 2.0 * layout.vp * send_seconds(cluster, span, bytes);
  }
  return work;
}

const LayoutEvaluator::StageWork& LayoutEvaluator::stage_work(const Layout& layout,
                                                              const Stage& stage, int64_t policy) {
  const WorkKey key{stage.chunks, stage.embedding, stage.head, policy};
  const auto found = work_cache_.find(key);
  if (found != work_cache_.end()) return found->second;
  return work_cache_.emplace(key, make_stage_work(layout, stage, policy)).first->second;
}

// The most trained parameters one model chunk of `stage` holds: its largest chunk's blocks and
// whatever the stage holds besides blocks (embedding, head), as an upper bound.
int64_t LayoutEvaluator::largest_chunk_trained(const Stage& stage) {
  if (stage.layers == 0 || stage.parameters == 0) return stage.trained;
  const double trained_share =
      static_cast<double>(stage.trained) / static_cast<double>(stage.parameters);
  const double other_chunks = static_cast<double>(stage.layers - stage.chunk_layers) *
                              static_cast<double>(stage.layer_parameters) * trained_share;
  const auto chunks = static_cast<int64_t>(std::max<std::size_t>(1, stage.chunks.size()));
  return std::max(stage.trained / chunks, stage.trained - static_cast<int64_t>(other_chunks));
}

// The largest parameter whose gradient backward forms first on `stage` (in a bucket of its own
// when it is larger than one): the head's where the stage has it (a tied head's waits for the
// embedding's on a stage holding both), else a block's MLP matrix (an expert's). Adapters only
// (fine-tuning): small.
int64_t LayoutEvaluator::first_gradients_parameter(const Layout& layout, const Stage& stage) const {
  const estimate::Architecture& arch = request_.arch;
  if (arch.lora.enabled() || stage.layers == 0) return 0;
  const int64_t width = arch.moe.enabled() ? arch.expert_hidden : arch.mlp_hidden;
  const int64_t block = arch.d_model * width / layout.tp;
  const bool head_first = stage.head && !(arch.tied_head && stage.embedding);
  return head_first ? std::max(block, arch.vocab / layout.tp * arch.d_model) : block;
}

int64_t LayoutEvaluator::buffer_bytes(const Layout& layout, const Stage& stage) const {
  const estimate::Architecture& arch = request_.arch;
  const int64_t w = estimate::bytes_per_value(request_.precision);
  const int64_t g = request_.gradient_bytes();
  int64_t bytes = 0;
  if (layout.zero == 3) {
    // Gathered whole: the running block and the next one prefetched, and one block's gradients.
    bytes += (2 * w + g) * stage.layer_parameters;
  } else if (states_offloaded(layout)) {
    // Two buckets' gradients whole (being moved, or formed), never more than the stage's.
    bytes += std::min(2 * request_.bucket_values, stage.trained) * g;
  } else if (layout.zero == 2) {
    // When the activations peak, backward has begun one bucket, whole from its first gradient
    // (never more than a model chunk's gradients: buckets do not span chunks; a parameter larger
    // than a bucket is one of its own); the ones it sends and reduces later come once backward
    // has freed more activations than they hold. Measured here: one bucket, not the two on the
    // wire at most, puts the peak within 2 % (docs/layout.md).
    bytes += std::max(std::min(request_.bucket_values, largest_chunk_trained(stage)),
                      first_gradients_parameter(layout, stage)) *
             g;
  }
  const int64_t tokens = layout.micro_batch * arch.seq_len / layout.cp;
  if (layout.pp > 1) bytes += 2 * tokens * arch.d_model * w / (layout.sp ? layout.tp : 1);
  if (layout.cp > 1) {  // the whole sequence's keys and values, and their gradients
    bytes += 2 * 2 * layout.micro_batch * arch.seq_len * kv_rank_width(arch, layout.tp) * w;
  }
  return bytes;
}

double LayoutEvaluator::exposed_transfers(const Layout& layout, const Stage& stage, int64_t policy,
                                          const StageWork& work, TimeParts& time) const {
  const GpuKind& gpu = request_.cluster.gpu;
  const int64_t w = estimate::bytes_per_value(request_.precision);
  const int64_t g = request_.gradient_bytes();
  // What the compute can hide (nothing where the same cores run both).
  const double busy =
      gpu.overlaps_communication ? work.compute_s + work.recompute_s + work.elementwise_s : 0.0;
  // ZeRO-3 gathers the weights for forward, backward and a recomputation, and reduce-scatters
  // the gradients, every micro-batch; prefetching hides what the compute covers.
  if (layout.zero == 3) {
    // Per state group: the experts' states over the dp·cp/ep ranks holding the same experts.
    ShardedBlocks blocks;
    blocks.blocks = stage.layers;
    blocks.attention_parameters = stage.attention_parameters;
    blocks.mlp_parameters = stage.layer_parameters - stage.attention_parameters;
    blocks.recompute_interval = std::max<int64_t>(policy, 0);
    double seconds = 0.0;
    double first = 0.0;
    double host_bytes = 0.0;
    for (const StateGroup& group :
         state_groups(layout, stage.parameters, stage.expert_parameters)) {
      const ShardedTransfers transfers =
          request_.engine_only
              ? engine_unit_transfers(request_.cluster, layout, group, blocks, w, g, engine_gloo())
              : block_transfers(request_.cluster, layout, group, blocks, w, g);
      seconds += transfers.seconds;
      first += transfers.first;
      host_bytes += transfers.shard_bytes_gathered;
    }
    if (layout.offload == Offload::kParameters) {
      seconds = std::max(seconds, host_bytes / gpu.host_link_bandwidth);
    }
    // With prefetching the first gather is always exposed; without it every one is.
    time.data = gpu.overlaps_communication ? std::max(0.0, seconds - busy) + first : seconds;
  }
  if (layout.offload == Offload::kActivations) {
    const double moved = 2.0 * static_cast<double>(work.own.offloaded);
    time.offload = std::max(0.0, moved / gpu.host_link_bandwidth - busy);
  }
  return time.data + time.offload;
}

LayoutEvaluator::StageCost LayoutEvaluator::stage_cost(const Layout& layout, const Stage& stage,
                                                       int64_t policy) {
  StageCost cost;
  StageFigures& figures = cost.at_one;
  figures.checkpoint = policy_text(policy);
  figures.layers = stage.layers;
  figures.in_flight = 1;
  const ModelStates states =
      model_states(stage.trained, layout, request_.precision, request_.fp32_gradients,
                   stage.frozen_bytes, stage.expert_parameters);
  figures.memory = states.device;
  // Activations: the chunks in flight keep what their forward saved; one of them (the one with
  // the embedding or the head, if the rank has it) runs through its peak.
  const StageWork& work = stage_work(layout, stage, policy);
  cost.rerun = work.rerun;
  cost.forward_share = work.forward_share;
  cost.backward_share = work.backward_share;
  figures.memory.activations = work.own.peak;
  cost.host_at_one = states.host_bytes + work.own.offloaded;
  if (per_chunk(policy)) {
    // Chunks under policies of their own: each as it is (its blocks, the embedding or the head),
    // walked through the schedule with what its backward rises above what it saved
    // (activations_held); at one in flight, the one that rises highest.
    figures.memory.activations = 0;
    for (size_t index = 0; index < stage.chunks.size(); ++index) {
      const ChunkActivations chunk = chunk_activations(
          layout, stage.chunks[index], chunk_policy(policy, index), stage.embedding && index == 0,
          stage.head && index + 1 == stage.chunks.size());
      cost.saved_by_chunk.push_back(chunk.saved);
      cost.offloaded_by_chunk.push_back(chunk.offloaded);
      cost.rise_by_chunk.push_back(chunk.peak - chunk.saved);
      figures.memory.activations = std::max(figures.memory.activations, chunk.peak);
    }
    // In host memory: the passes held of what each chunk offloads (in_flight adds them).
    cost.host_at_one = states.host_bytes + *std::max_element(cost.offloaded_by_chunk.begin(),
                                                             cost.offloaded_by_chunk.end());
  } else {
    for (int64_t blocks : stage.chunks) {
      const ChunkActivations chunk = blocks == stage.chunk_layers
                                         ? work.plain
                                         : chunk_activations(layout, blocks, policy, false, false);
      cost.saved_by_chunk.push_back(chunk.saved);
      cost.offloaded_by_chunk.push_back(chunk.offloaded);
    }
  }
  figures.memory.buffers = buffer_bytes(layout, stage);

  TimeParts& time = cost.time;
  time.compute = work.compute_s;
  time.recompute = work.recompute_s;
  time.elementwise = work.elementwise_s;
  time.tensor = work.tensor_s;
  time.experts = work.experts_s;
  time.context = work.context_s;
  time.pipeline = work.pipeline_s;
  figures.microbatch_s = work.compute_s + work.recompute_s + work.elementwise_s + work.tensor_s +
                         work.experts_s + work.context_s + work.pipeline_s +
                         exposed_transfers(layout, stage, policy, work, time);
  return cost;
}

std::vector<LayoutEvaluator::Stage> LayoutEvaluator::stages_of(const Layout& layout) const {
  const estimate::Architecture& arch = request_.arch;
  const int64_t vocab = padded_vocab(arch.vocab, layout.tp);
  const int64_t d = arch.d_model;
  estimate::Architecture split_arch = arch;
  split_arch.vocab = vocab;
  const estimate::UnitParameters units = estimate::unit_parameter_counts(split_arch, layout.tp);
  const int64_t norm = arch.rms_norm ? d : 2 * d;
  const int64_t embedding = vocab / layout.tp * d + (arch.learned_positions ? arch.seq_len * d : 0);
  // Split over stages a tied head keeps its own copy of the embedding's weight.
  const int64_t head = (arch.tied_head && layout.pp == 1 ? 0 : vocab / layout.tp * d) + norm;
  // Fine-tuning (on one tensor rank: fine_tuning_problem): a block's adapters and its frozen
  // weights as the base stores them, the embedding (fp32 under any base) and what the last stage
  // holds besides its blocks: the final norm and an untied head as the base stores it (a bf16
  // base keeps it in 16 bits), or a tied head's own fp32 copy once split over stages. Taken from
  // ModelConfig::frozen_base_bytes of one block and of two, so every byte is its count's.
  struct Tuned {
    int64_t adapters_per_block = 0;
    int64_t frozen_block_bytes = 0;
    int64_t frozen_embedding_bytes = 0;
    int64_t frozen_head_bytes = 0;
  };
  std::optional<Tuned> tuned;
  if (arch.lora.enabled()) {
    ModelConfig config = estimate::to_model_config(split_arch);
    config.layers = 1;
    const ModelConfig one_block = config;
    config.layers = 2;
    const int64_t block = config.frozen_base_bytes() - one_block.frozen_base_bytes();
    const int64_t embedding_bytes = 4 * embedding;
    const int64_t tied_copy = arch.tied_head && layout.pp > 1 ? 4 * (vocab / layout.tp * d) : 0;
    tuned = Tuned{one_block.adapter_parameter_count(), block, embedding_bytes,
                  one_block.frozen_base_bytes() - block - embedding_bytes + tied_copy};
  }
  // A block's experts on one tensor rank (unit_parameter_counts counts them in its MLP, each
  // split by width), and one expert rank's share of them.
  const int64_t layer_experts = estimate::expert_parameter_count(arch) / arch.layers / layout.tp;
  const int64_t rank_layer_experts = layer_experts / layout.ep;
  std::vector<Stage> stages;
  const std::vector<std::vector<int64_t>> chunks = chunks_by_rank(layout.split, layout.pp);
  for (int64_t rank = 0; rank < layout.pp; ++rank) {
    Stage stage;
    stage.chunks = chunks[static_cast<size_t>(rank)];
    for (int64_t size : stage.chunks) stage.layers += size;
    stage.chunk_layers = *std::max_element(stage.chunks.begin(), stage.chunks.end());
    stage.embedding = rank == 0;
    stage.head = rank == layout.pp - 1;
    // As the engine orders it: 1F1B, or interleaved with virtual stages.
    stage.in_flight = parallel::PipelineSchedule::most_held(
        layout.pp, rank, layout.accum, std::vector<int64_t>(stage.chunks.size(), 1));
    std::tie(stage.rank, stage.pipeline_stages, stage.micro_batches) =
        std::make_tuple(rank, layout.pp, layout.accum);
    stage.layer_parameters = units.attention + units.mlp - (layer_experts - rank_layer_experts);
    stage.attention_parameters = units.attention;
    stage.expert_parameters = stage.layers * rank_layer_experts;
    stage.parameters = stage.layers * stage.layer_parameters + (stage.embedding ? embedding : 0) +
                       (stage.head ? head : 0);
    stage.trained = stage.parameters;
    if (tuned) {
      stage.trained = stage.layers * tuned->adapters_per_block;
      stage.frozen_bytes = stage.layers * tuned->frozen_block_bytes +
                           (stage.embedding ? tuned->frozen_embedding_bytes : 0) +
                           (stage.head ? tuned->frozen_head_bytes : 0);
    }
    stages.push_back(stage);
  }
  return stages;
}

const LayoutEvaluator::StageCost& LayoutEvaluator::choose_policy(
    const std::vector<StageCost>& costs, const Stage& stage) const {
  const int64_t device = request_.cluster.gpu.memory_bytes;
  const StageCost* chosen = nullptr;
  int64_t chosen_total = 0;
  bool fits = false;
  for (const StageCost& cost : costs) {
    const int64_t total = total_in_flight(cost, stage);
    const bool trial_fits = total <= device;
    const bool better =
        !chosen ||
        (trial_fits && (!fits || cost.at_one.microbatch_s < chosen->at_one.microbatch_s)) ||
        (!trial_fits && !fits && total < chosen_total);
    if (better) {
      chosen = &cost;
      chosen_total = total;
      fits = trial_fits;
    }
  }
  return *chosen;
}

LayoutEvaluator::Placed LayoutEvaluator::place_stages(const Layout& layout, bool detail,
                                                      LayoutEvaluation& result) {
  // The search varies ZeRO and offload innermost: what does not depend on them is kept.
  const WorkLayout work_layout{
      layout.tp, layout.sp,          layout.cp,
      layout.dp, layout.ep,          layout.pp,
      layout.vp, layout.micro_batch, layout.offload == Offload::kActivations};
  if (work_layout != work_layout_) {
    work_cache_.clear();
    held_cache_.clear();
    peak_cache_.clear();
    walk_cache_.clear();
    work_layout_ = work_layout;
  }
  // Ranks of one shape (the same chunks, embedding and head) cost the same but for the chunks
  // they hold in flight: each shape's policies are costed once — under a policy given per stage,
  // once for each policy given (two stages of one shape may be given different ones).
  constexpr int64_t kEveryPolicyWeighed = std::numeric_limits<int64_t>::min();
  std::map<std::tuple<std::vector<int64_t>, bool, bool, int64_t>, std::vector<StageCost>> shapes;
  if (detail) result.layout.stage_checkpoints.resize(static_cast<size_t>(layout.pp));
  Placed placed;
  size_t index = 0;
  for (const Stage& stage : stages_of(layout)) {
    if (stage.trained > placed.most_trained) {
      placed.most_trained = stage.trained;
      placed.most_trained_experts = stage.expert_parameters;
    }
    const bool given = index < layout.stage_checkpoints.size();
    const int64_t policy =
        given ? policy_code(layout.stage_checkpoints[index]) : kEveryPolicyWeighed;
    std::vector<StageCost>& costs = shapes[{stage.chunks, stage.embedding, stage.head, policy}];
    if (costs.empty() && given) {
      costs.push_back(stage_cost(layout, stage, policy));
    } else if (costs.empty()) {
      costs.push_back(stage_cost(layout, stage, kNonePolicy));
      costs.push_back(stage_cost(layout, stage, kSelectivePolicy));
      for (int64_t k = 1; k <= stage.chunk_layers; k *= 2) {
        costs.push_back(stage_cost(layout, stage, k));
      }
    }
    const StageCost& chosen = choose_policy(costs, stage);
    int64_t host_bytes = 0;
    const StageFigures figures = in_flight(chosen, stage, host_bytes);
    result.recomputes = result.recomputes || chosen.rerun > 0.0;
    if (figures.memory.total() > result.memory.total()) result.memory = figures.memory;
    result.host_bytes = std::max(result.host_bytes, host_bytes);
    if (figures.microbatch_s > placed.slowest) {
      placed.slowest = figures.microbatch_s;
      placed.slowest_time = chosen.time;
    }
    if (layout.pp > 1) {
      placed.forward.emplace_back();
      placed.backward.emplace_back();
      for (size_t chunk = 0; chunk < chosen.forward_share.size(); ++chunk) {
        placed.forward.back().push_back(figures.microbatch_s * chosen.forward_share[chunk]);
        placed.backward.back().push_back(figures.microbatch_s * chosen.backward_share[chunk]);
      }
    }
    if (detail) {
      result.layout.stage_checkpoints[index] = figures.checkpoint;
      result.stages.push_back(figures);
    }
    ++index;
  }
  return placed;
}

LayoutEvaluation LayoutEvaluator::evaluate(const Layout& searched, bool detail) {
  const Cluster& cluster = request_.cluster;
  Layout layout = searched;  // not result.layout, which place_stages fills in
  if (layout.split.empty()) layout.split = chain_split(searched);
  LayoutEvaluation result;
  result.layout = layout;
  if (const std::string lack = engine_pipeline_lack(layout); !lack.empty()) {
    result.engine_lacks.push_back(lack);
  }
  if (const std::string lack = engine_experts_lack(request_, layout); !lack.empty()) {
    result.engine_lacks.push_back(lack);
  }
  if (layout.cp > 1) result.engine_lacks.push_back("context parallelism");
  if (states_offloaded(layout)) result.engine_lacks.push_back("model states in host memory");
  // What validate_tensor_parallel refuses (run/run_config.cpp).
  if (layout.tp > 1 && request_.arch.qk_norm) {
    result.engine_lacks.push_back("q/k norms over tensor ranks");
  }
  if (layout.tp > 1 && request_.arch.dropout > 0.0) {
    result.engine_lacks.push_back("dropout over tensor ranks");
  }
  if (!shard_trains_in(engine_shard(layout), request_.precision)) {
    result.engine_lacks.push_back("sharded parameters in " + to_string(request_.precision));
  }
  finish_step(layout, place_stages(layout, detail, result), result);
  result.device_fits = result.memory.total() <= cluster.gpu.memory_bytes;
  result.fits =
      result.device_fits && result.host_bytes * cluster.node_gpus() <= cluster.host_memory_bytes;
  if (detail) result.reason = shortfall(request_, result);
  return result;
}

}  // namespace rematlab::layout
