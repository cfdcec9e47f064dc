// What a pipeline stage holds at its peak: one micro-batch's chunk running through its peak, and
// the chunk passes its schedule holds beside it.
#include <algorithm>
#include <cmath>

#include "layout/layout_evaluator.h"
#include "parallel/pipeline_schedule.h"

namespace rematlab::layout {

void LayoutEvaluator::set_chunk_activations(const Layout& layout, const Stage& stage,
                                            int64_t policy, StageWork& work) {
  // The chunk with the embedding or the head (the first, or the last), and the largest, each
  // under its own policy where the rank's chunks have their own.
  const size_t own_chunk = stage.head && !stage.embedding ? stage.chunks.size() - 1 : 0;
  const auto largest = static_cast<size_t>(
      std::max_element(stage.chunks.begin(), stage.chunks.end()) - stage.chunks.begin());
  work.own = chunk_activations(layout, stage.chunk_layers, chunk_policy(policy, own_chunk),
                               stage.embedding, stage.head);
  work.plain = layout.vp > 1 && (stage.embedding || stage.head)
                   ? chunk_activations(layout, stage.chunk_layers, chunk_policy(policy, largest),
                                       false, false)
                   : work.own;
}

int64_t LayoutEvaluator::held_beyond_one(const Stage& stage,
                                         const std::vector<int64_t>& by_chunk) const {
  // The largest chunk is the one running (at_one).
  const int64_t running = *std::max_element(by_chunk.begin(), by_chunk.end());
  if (by_chunk.size() == 1) {
    return parallel::PipelineSchedule::most_held(stage.pipeline_stages, stage.rank,
                                                 stage.micro_batches, by_chunk) -
           running;
  }
  const HeldKey key{stage.pipeline_stages, stage.rank, stage.micro_batches, by_chunk};
  auto found = held_cache_.find(key);
  if (found == held_cache_.end()) {
    found = held_cache_
                .emplace(key, parallel::PipelineSchedule::most_held(
                                  stage.pipeline_stages, stage.rank, stage.micro_batches, by_chunk))
                .first;
  }
  return found->second - running;
}

int64_t LayoutEvaluator::activations_held(const StageCost& cost, const Stage& stage) const {
  if (!cost.rise_by_chunk.empty()) {
    const auto key = std::make_pair(
        HeldKey{stage.pipeline_stages, stage.rank, stage.micro_batches, cost.saved_by_chunk},
        cost.rise_by_chunk);
    auto found = peak_cache_.find(key);
    if (found == peak_cache_.end()) {
      found = peak_cache_
                  .emplace(key, parallel::PipelineSchedule::peak_with_backward(
                                    stage.pipeline_stages, stage.rank, stage.micro_batches,
                                    cost.saved_by_chunk, cost.rise_by_chunk))
                  .first;
    }
    return found->second;
  }
  return cost.at_one.memory.activations + held_beyond_one(stage, cost.saved_by_chunk);
}

int64_t LayoutEvaluator::total_in_flight(const StageCost& cost, const Stage& stage) const {
  const int64_t allocated =
      cost.at_one.memory.total() - cost.at_one.memory.activations + activations_held(cost, stage);
  return allocated + static_cast<int64_t>(
                         std::llround(request_.fragmentation * static_cast<double>(allocated)));
}

StageFigures LayoutEvaluator::in_flight(const StageCost& cost, const Stage& stage,
                                        int64_t& host_bytes) const {
  StageFigures figures = cost.at_one;
  figures.in_flight = stage.in_flight;
  figures.memory.activations = activations_held(cost, stage);
  figures.memory.allowance = 0;
  figures.memory.allowance = static_cast<int64_t>(
      std::llround(request_.fragmentation * static_cast<double>(figures.memory.total())));
  host_bytes = cost.host_at_one + held_beyond_one(stage, cost.offloaded_by_chunk);
  return figures;
}

}  // namespace rematlab::layout
