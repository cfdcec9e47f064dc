#include "plan/stage_plans.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "checkpoint/stage_blocks.h"
#include "plan/chain_profile.h"
#include "plan/segment_planner.h"

namespace rematlab::plan {
namespace {

// Each stage's chunks are planned under a budget for one micro-batch of this many steps of the
// stage's budget; the fastest that fits with its micro-batches in flight wins. Holding less of
// each micro-batch lets more of them fit: a chunk's fastest plan is not the stage's.
constexpr int64_t kBudgetSteps = 48;

// Sublayers [begin, end) of `whole` as a chain of their own: its input the previous sublayer's
// output (received from the previous stage), the embedding's backward only on the first chunk,
// the head and loss only on the last.
ChainCosts chunk_costs(const ChainCosts& whole, int64_t begin, int64_t end) {
  ChainCosts part;
  part.stages.assign(whole.stages.begin() + begin, whole.stages.begin() + end);
  const bool first = begin == 0;
  const bool last = end == static_cast<int64_t>(whole.stages.size());
  part.input_bytes = first ? whole.input_bytes : whole.stages[begin - 1].output_bytes;
  part.embedding_backward_peak_bytes = first ? whole.embedding_backward_peak_bytes : 0;
  part.head_peak_bytes = last ? whole.head_peak_bytes : 0;
  part.time_scale = whole.time_scale;
  return part;
}

// Each stage's chunks' costs, in the stage's order.
std::vector<std::vector<ChainCosts>> stage_chunks(const ChainCosts& costs,
                                                  const PipelineShape& shape) {
  const int64_t count = shape.stages * shape.chunks;
  if (static_cast<int64_t>(costs.stages.size()) != 2 * shape.layers) {
    // Costs and shape both come from the run's config (a kept profile only by its model's key).
    throw std::logic_error("a profile of another model's chain");
  }
  const std::vector<int64_t> bounds = chunk_block_bounds(shape.layers, count, shape.chunk_blocks);
  std::vector<std::vector<ChainCosts>> by_stage(static_cast<std::size_t>(shape.stages));
  for (int64_t chunk = 0; chunk < count; ++chunk) {
    const auto at = static_cast<std::size_t>(chunk);
    by_stage[static_cast<std::size_t>(chunk % shape.stages)].push_back(
        chunk_costs(costs, 2 * bounds[at], 2 * bounds[at + 1]));
  }
  return by_stage;
}

// The fastest plan of each chunk whose one micro-batch peaks within `each`, and the stage's peak
// with its micro-batches in flight: the most they hold at once (counted right after a forward,
// so the pass about to run its backward is among them), with whichever chunk rises furthest above
// what it holds passing through its peak. An upper bound: the chunk at its peak need not be
// running when the most is held.
std::optional<StagePlan> stage_within(const std::vector<ChainCosts>& chunks, int64_t stage,
                                      const PipelineShape& shape, int64_t each) {
  StagePlan plan;
  std::vector<int64_t> held;
  int64_t rise = 0;
  for (const ChainCosts& costs : chunks) {
    const std::optional<PlannedChain> chosen = plan_under_budget(costs, each);
    if (!chosen) return std::nullopt;
    held.push_back(chosen->prediction.held_bytes);
    rise = std::max(rise, chosen->prediction.peak_bytes - chosen->prediction.held_bytes);
    plan.compute_ms += chosen->prediction.step_ms;
    plan.chunks.push_back(chosen->plan);
  }
  plan.peak_bytes = stage_peak_bytes(held, rise, stage, shape);
  return plan;
}

std::optional<StagePlan> plan_stage(const std::vector<ChainCosts>& chunks, int64_t stage,
                                    const PipelineShape& shape, int64_t budget,
                                    const std::atomic<bool>* cancel) {
  std::optional<StagePlan> best;
  for (int64_t step = kBudgetSteps; step >= 1; --step) {
    if (cancel && cancel->load()) throw ProfileCancelled();
    // budget · step / steps without overflow: the budget may be any int64.
    const int64_t each = budget / kBudgetSteps * step + budget % kBudgetSteps * step / kBudgetSteps;
    std::optional<StagePlan> plan = stage_within(chunks, stage, shape, each);
    if (!plan || plan->peak_bytes > budget) continue;
    if (!best || plan->compute_ms < best->compute_ms) best = std::move(plan);
  }
  return best;
}

// Every stage planned under `budget_bytes` from its chunks' costs (stage_chunks), split once.
std::optional<PipelinePlan> plan_split_stages(const std::vector<std::vector<ChainCosts>>& by_stage,
                                              const PipelineShape& shape, int64_t budget_bytes,
                                              const std::atomic<bool>* cancel) {
  PipelinePlan pipeline;
  for (int64_t stage = 0; stage < shape.stages; ++stage) {
    std::optional<StagePlan> plan =
        plan_stage(by_stage[static_cast<std::size_t>(stage)], stage, shape, budget_bytes, cancel);
    if (!plan) return std::nullopt;
    pipeline.peak_bytes = std::max(pipeline.peak_bytes, plan->peak_bytes);
    pipeline.compute_ms = std::max(pipeline.compute_ms, plan->compute_ms);
    pipeline.stages.push_back(std::move(*plan));
  }
  pipeline.policy = "stages:";
  for (int64_t chunk = 0; chunk < shape.stages * shape.chunks; ++chunk) {
    const StagePlan& stage = pipeline.stages[static_cast<std::size_t>(chunk % shape.stages)];
    pipeline.policy += (chunk == 0 ? "" : "/") +
                       stage.chunks[static_cast<std::size_t>(chunk / shape.stages)].canonical();
  }
  return pipeline;
}

}  // namespace

int64_t stage_peak_bytes(const std::vector<int64_t>& held, int64_t rise, int64_t stage,
                         const PipelineShape& shape) {
  constexpr int64_t kMost = std::numeric_limits<int64_t>::max();
  const int64_t all_chunks = std::accumulate(held.begin(), held.end(), int64_t{0});
  const int64_t passes =
      std::min(shape.chunks * shape.micro_batches, (shape.chunks + 2) * shape.stages);
  if (all_chunks > (kMost - rise) / std::max<int64_t>(1, passes)) return kMost;
  return shape.most_held(stage, held) + rise;
}

std::optional<PipelinePlan> plan_stages_under_budget(const ChainCosts& costs,
                                                     const PipelineShape& shape,
                                                     int64_t budget_bytes,
                                                     const std::atomic<bool>* cancel) {
  return plan_split_stages(stage_chunks(costs, shape), shape, budget_bytes, cancel);
}

int64_t smallest_stages_budget(const ChainCosts& costs, const PipelineShape& shape,
                               const std::atomic<bool>* cancel) {
  const std::vector<std::vector<ChainCosts>> by_stage = stage_chunks(costs, shape);
  // Without checkpointing every stage fits what it then holds.
  int64_t fits = 0;
  for (int64_t stage = 0; stage < shape.stages; ++stage) {
    // A chunk's plan without checkpointing fits 2^62: the chain holds at most 1 PiB
    // (chain_costs_json.h), and a stage that holds it too often saturates.
    const std::optional<StagePlan> none =
        stage_within(by_stage[static_cast<std::size_t>(stage)], stage, shape, int64_t{1} << 62);
    if (!none) throw std::logic_error("a chunk that fits no plan under 2^62 bytes");
    fits = std::max(fits, none->peak_bytes);
  }
  int64_t fails = 0;
  while (fits - fails > std::max<int64_t>(1, fits / 1000)) {
    const int64_t middle = fails + (fits - fails) / 2;
    if (plan_split_stages(by_stage, shape, middle, cancel)) {
      fits = middle;
    } else {
      fails = middle;
    }
  }
  return fits;
}

}  // namespace rematlab::plan
