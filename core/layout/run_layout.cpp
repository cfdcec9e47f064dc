#include "layout/run_layout.h"

#include <algorithm>

#include "checkpoint/checkpoint_policy.h"
#include "common/errors.h"
#include "estimate/architecture.h"
#include "layout/gpu_catalog.h"
#include "layout/layout_evaluator.h"
#include "layout/layout_rules.h"
#include "run/shard_mode.h"

namespace rematlab::layout {
namespace {

// A policy the planner weighs (none, selective, every:K), as its text; else InvalidInput.
std::string weighed_policy(const CheckpointPolicy& policy, const std::string& whole) {
  using Kind = CheckpointPolicy::Kind;
  if (policy.kind() != Kind::kNone && policy.kind() != Kind::kSelective &&
      policy.kind() != Kind::kEvery) {
    throw InvalidInput("--checkpoint",
                       "the layout planner estimates stages under none, selective "
                       "and every:K (got " +
                           whole + ")");
  }
  return policy.text();
}

// One policy per pipeline stage, from `text` (one for all, or stages: with one each).
std::vector<std::string> stage_policies(const std::string& text, int64_t stages) {
  const CheckpointPolicy policy = CheckpointPolicy::parse(text);
  if (policy.kind() != CheckpointPolicy::Kind::kStages) {
    return std::vector<std::string>(static_cast<size_t>(stages), weighed_policy(policy, text));
  }
  if (static_cast<int64_t>(policy.stages().size()) != stages) {
    throw InvalidInput("--checkpoint", text + " gives " + std::to_string(policy.stages().size()) +
                                           " policies for " + std::to_string(stages) + " stages");
  }
  std::vector<std::string> policies;
  for (const CheckpointPolicy& stage : policy.stages()) {
    policies.push_back(weighed_policy(stage, text));
  }
  return policies;
}

}  // namespace

LayoutEvaluation evaluate_run(const RunConfig& config, const std::string& checkpoint) {
  if (config.offload != "none") {
    throw InvalidInput("--offload", "the layout planner does not estimate the engine's " +
                                        config.offload + " offload stage by stage");
  }
  const int64_t data_ranks = config.data_ranks();
  LayoutRequest request;
  request.arch = estimate::from_model_config(config.model);
  request.precision = config.precision;
  request.fragmentation = 0.0;
  request.bucket_values = std::max<int64_t>(1, config.bucket_bytes / 4);  // fp32 gradients
  // Room for any figure: only the memory is asked for (the kind's links and peak are placeholders).
  request.cluster.gpu = gpu_kind("h100-sxm");
  request.cluster.gpu.memory_bytes = int64_t{1} << 50;
  request.cluster.gpus = request.cluster.gpus_per_node = config.world_size;
  request.cluster.gpu.gpus_per_node = config.world_size;
  request.global_batch = config.batch * config.accum * data_ranks;
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
  layout.stage_checkpoints =
      stage_policies(checkpoint.empty() ? config.checkpoint : checkpoint, config.pp);
  if (const std::string problem = structural_problem(request, layout); !problem.empty()) {
    throw InvalidInput("layout", problem);
  }
  LayoutEvaluator evaluator(request);
  return evaluator.evaluate(layout);
}

}  // namespace rematlab::layout
