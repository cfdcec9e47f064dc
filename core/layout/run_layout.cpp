#include "layout/run_layout.h"

#include <algorithm>

#include "common/errors.h"
#include "estimate/architecture.h"
#include "layout/gpu_catalog.h"
#include "layout/layout_evaluator.h"
#include "layout/layout_rules.h"
#include "layout/stage_policies.h"
#include "run/shard_mode.h"

namespace rematlab::layout {
namespace {

// What no evaluation of the run's stages can take (a record edited by hand, or a setting the
// planner does not model): InvalidInput naming it.
void refuse_unestimable(const RunConfig& config) {
  if (config.world_size < 1) {
    throw InvalidInput("--nproc", "must be at least 1, got " + std::to_string(config.world_size));
  }
  if (config.offload != "none") {
    throw InvalidInput("--offload", "the layout planner does not estimate the engine's " +
                                        config.offload + " offload stage by stage");
  }
  if (config.pp_split_balanced && config.pp_split.empty()) {
    throw InvalidInput("--pp-split",
                       "balanced when the run starts, and this run recorded no "
                       "split (it ended before choosing one)");
  }
  // Beyond this many chunks one evaluation walks a schedule too long for the advisor to wait on
  // (the engine runs more only in a record edited by hand).
  constexpr int64_t kMostChunks = 1024;
  if (config.pp > kMostChunks ||
      config.virtual_stages > kMostChunks / std::max<int64_t>(1, config.pp)) {
    throw InvalidInput("--pp", "more than the " + std::to_string(kMostChunks) +
                                   " pipeline chunks the advisor estimates");
  }
}

// Sequences a step of the run trains over its data ranks, or InvalidInput where they overflow.
int64_t step_sequences(const RunConfig& config) {
  int64_t sequences = 0;
  if (__builtin_mul_overflow(config.batch, config.accum, &sequences) ||
      __builtin_mul_overflow(sequences, config.data_ranks(), &sequences)) {
    throw InvalidInput("--batch", "a step of " + std::to_string(config.batch) + " × " +
                                      std::to_string(config.accum) + " × " +
                                      std::to_string(config.data_ranks()) +
                                      " sequences is beyond what the planner counts");
  }
  return sequences;
}

}  // namespace

LayoutEvaluation evaluate_run(const RunConfig& config, const std::string& checkpoint) {
  refuse_unestimable(config);
  const int64_t data_ranks = config.data_ranks();
  LayoutRequest request;
  request.arch = estimate::from_model_config(config.model);
  request.precision = config.precision;
  request.fragmentation = 0.0;
  request.bucket_values = std::max<int64_t>(1, config.bucket_bytes / 4);  // fp32 gradients
  // Room for any figure: only the memory is asked for (the kind's links and peak are placeholders).
  request.cluster.gpu = gpu_kind("h100-sxm");
  request.cluster.gpu.memory_bytes = int64_t{1} << 50;
  // One node where the planner takes one that large; else its largest divisor of the world.
  int64_t node = std::min(config.world_size, kMaxGpusPerNode);
  while (config.world_size % node != 0) --node;
  request.cluster.gpus = config.world_size;
  request.cluster.gpus_per_node = request.cluster.gpu.gpus_per_node = node;
  request.global_batch = step_sequences(config);
  const int zero = static_cast<int>(data_ranks > 1 ? parse_shard(config.shard) : ShardMode::kNone);
  FixedDimensions& fixed = request.fixed;
  fixed.tp = config.tp;
  fixed.pp = config.pp;
  fixed.vp = config.virtual_stages;
  fixed.cp = 1;
  fixed.dp = data_ranks;
  fixed.ep = config.ep;
  fixed.sp = config.sequence_parallel;
  fixed.zero = zero;
  fixed.micro_batch = config.batch;
  fixed.offload = Offload::kNone;
  if (config.pp > 1) fixed.pp_split = config.pp_split;
  estimate::validate(request.arch);
  validate(request);

  Layout layout;
  layout.tp = config.tp;
  layout.pp = config.pp;
  layout.vp = config.virtual_stages;
  layout.dp = data_ranks;
  layout.ep = config.ep;
  layout.sp = config.sequence_parallel;
  layout.zero = zero;
  layout.micro_batch = config.batch;
  layout.accum = config.accum;
  const std::vector<int64_t> split =
      config.pp > 1 && !config.pp_split.empty()
          ? config.pp_split
          : rule_split(config.model.layers, config.pp, config.virtual_stages);
  layout.stage_checkpoints = rank_policies(checkpoint.empty() ? config.checkpoint : checkpoint,
                                           config.pp, config.virtual_stages, split);
  check_named_blocks(layout.stage_checkpoints, split, config.pp);
  if (const std::string problem = structural_problem(request, layout); !problem.empty()) {
    throw InvalidInput("layout", problem);
  }
  LayoutEvaluator evaluator(request);
  LayoutEvaluation evaluation = evaluator.evaluate(layout);
  if (!evaluation.engine_lacks.empty()) {  // a record the engine would not have run
    throw InvalidInput("layout",
                       "RematLab's engine does not run " + evaluation.engine_lacks.front());
  }
  return evaluation;
}

}  // namespace rematlab::layout
