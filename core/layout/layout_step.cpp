// The step from its slowest stage's micro-batch: the pipeline's idling (its stages' orders played
// against one another), the data-parallel gradient reduction and weight gather, the update, and
// what they make of tokens/s and MFU.
#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "checkpoint/checkpoint_policy.h"
#include "estimate/flops.h"
#include "estimate/model_state.h"
#include "layout/collective_time.h"
#include "layout/layout_evaluator.h"
#include "layout/layout_states.h"
#include "layout/sharded_transfers.h"
#include "parallel/pipeline_schedule.h"

namespace rematlab::layout {
namespace {

// What the offloaded optimizer's CPU update reads and writes per parameter (fp32 gradient,
// master copy and two moments read; master, moments and the 16-bit weight written).
constexpr double kHostUpdateBytesPerParameter = 30.0;

double whole_shares(int64_t parameters, int64_t ranks) {
  return static_cast<double>((parameters + ranks - 1) / ranks);
}

// Data-parallel gradient reduction (an all-reduce, or a distributed optimizer's reduce-scatter),
// overlapped with the last micro-batch's `backward` except for the last bucket; under ZeRO 2
// every micro-batch's gradients are reduced so (no whole gradients kept between them). A
// distributed optimizer then gathers the updated weights before the next forward, which nothing
// hides (the engine's ZeRO 1 and 2; Megatron-LM without --overlap-param-gather). The experts'
// gradients are reduced over the ranks that hold the same experts (dp·cp/ep), after the rest's, in
// buckets of their own. `g` and `w`: bytes of a gradient and of a weight; `phases`: the
// reduction's passes round the ring (reduction_phases).
double exposed_reduction(const Cluster& cluster, const Layout& layout,
                         const std::vector<StateGroup>& groups, int64_t bucket_values, int64_t g,
                         int64_t w, int phases, double backward) {
  const int64_t span = layout.tp * layout.cp * layout.dp;
  double reducing = 0.0;
  double last_bucket = 0.0;  // the largest of a group's: the one backward cannot hide
  double gathering = 0.0;
  for (const auto& [ranks, parameters] : groups) {
    const double P = static_cast<double>(parameters);
    const double buckets = std::max(1.0, std::ceil(P / static_cast<double>(bucket_values)));
    const double bucket = ring_seconds(cluster, ranks, span, phases, P * g / buckets);
    last_bucket = std::max(last_bucket, bucket);
    reducing += buckets * bucket;
    if (layout.zero > 0) {
      gathering += buckets * all_gather_seconds(cluster, ranks, span, P * w / buckets);
    }
  }
  const double rounds = layout.zero == 2 ? static_cast<double>(layout.accum) : 1.0;
  return rounds * std::max(last_bucket, reducing - backward) + gathering;
}

}  // namespace

double LayoutEvaluator::walked_step(const Layout& layout, const Placed& placed) const {
  // Layouts that differ in ZeRO 0-2 and the optimizer's offload pass their micro-batches alike.
  auto key = std::make_tuple(layout.accum, placed.forward, placed.backward);
  const auto found = walk_cache_.find(key);
  if (found != walk_cache_.end()) return found->second;
  const double walked = parallel::PipelineSchedule::walked_step_seconds(
      layout.accum, placed.forward, placed.backward);
  walk_cache_.emplace(std::move(key), walked);
  return walked;
}

void LayoutEvaluator::finish_step(const Layout& layout, const Placed& placed,
                                  LayoutEvaluation& result) const {
  const Cluster& cluster = request_.cluster;
  const GpuKind& gpu = cluster.gpu;
  const int64_t w = estimate::bytes_per_value(request_.precision);
  const int64_t g = request_.gradient_bytes();
  const int64_t shard = layout.dp * layout.cp;
  // m micro-batches at the slowest stage's pace, plus the fill and drain.
  const double m = static_cast<double>(layout.accum);
  const TimeParts& one = placed.slowest_time;
  TimeParts& time = result.time;
  time.compute = m * one.compute;
  time.recompute = m * one.recompute;
  time.elementwise = m * one.elementwise;
  time.tensor = m * one.tensor;
  time.experts = m * one.experts;
  time.context = m * one.context;
  time.pipeline = m * one.pipeline;
  time.data = m * one.data;
  time.offload = m * one.offload;
  // The stages' orders played against one another, each chunk's passes at their own times.
  if (layout.pp > 1) {
    const double walked = walked_step(layout, placed);
    time.bubble = std::max(0.0, walked - m * placed.slowest);
    for (StageFigures& stage : result.stages) {
      stage.idle_s = std::max(0.0, walked - m * stage.microbatch_s);
    }
  }
  double step_s = m * placed.slowest + time.bubble;

  const std::vector<StateGroup> groups =
      state_groups(layout, placed.most_trained, placed.most_trained_experts);
  if (layout.zero < 3 && shard > 1) {
    const double backward = gpu.overlaps_communication
                                ? (2.0 / 3.0) * (one.compute + one.elementwise) + one.recompute
                                : 0.0;
    const int phases = reduction_phases(layout.zero, request_.engine_only, engine_gloo());
    const double exposed =
        exposed_reduction(cluster, layout, groups, request_.bucket_values, g, w, phases, backward);
    time.data += exposed;
    step_s += exposed;
  }
  // The update: on the GPU bound by memory bandwidth; offloaded, the gradients' shards go to the
  // host and the weights' come back over the host link, and the node's CPUs update every GPU's.
  double updated = 0.0;
  for (const auto& [ranks, parameters] : groups) {
    updated += whole_shares(parameters, layout.zero >= 1 ? ranks : 1);
  }
  if (states_offloaded(layout)) {
    const double host =
        updated * (g + w) / gpu.host_link_bandwidth + updated * kHostUpdateBytesPerParameter *
                                                          static_cast<double>(cluster.node_gpus()) /
                                                          cluster.host_memory_bandwidth;
    time.offload += host;
    step_s += host;
  } else {
    const double master = w < 4 ? 4.0 : 0.0;
    const double touched = (g + (master > 0 ? master : w) + 8.0) + (master + w + 8.0);
    time.optimizer = updated * touched / gpu.memory_bandwidth;
    step_s += time.optimizer;
  }
  result.step_s = step_s;
  const estimate::Architecture& arch = request_.arch;
  const double step_tokens = static_cast<double>(request_.global_batch * arch.seq_len);
  result.tokens_per_s = step_tokens / step_s;
  const CheckpointPlan none = CheckpointPolicy::none().plan_for(arch.layers, 0.0);
  const double model_flops =
      estimate::step_flops(arch, request_.global_batch * arch.seq_len, none).model;
  result.mfu = model_flops /
               (step_s * static_cast<double>(cluster.gpus) * gpu.peak_flops(request_.precision));
}

}  // namespace rematlab::layout
