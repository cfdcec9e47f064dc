#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <stdexcept>

namespace rematlab::parallel {

std::vector<int64_t> stage_block_bounds(int64_t layers, int64_t stages) {
  if (stages < 1 || stages > layers) throw std::invalid_argument("stages outside [1, layers]");
  std::vector<int64_t> sizes(static_cast<std::size_t>(stages), 0);
  if (stages <= 2) {
    sizes.front() = layers / stages;
    sizes.back() = layers - (stages - 1) * (layers / stages);
  } else {
    // Equal middle stages, the rest split between the ends (Megatron-LM splits the middle
    // evenly and takes the ends' counts as given): the ends, which also hold the embedding and
    // the head, take no more than a middle stage each.
    int64_t middle = (layers + stages - 1) / stages;
    int64_t ends = layers - (stages - 2) * middle;
    if (ends < 2) {  // too few left for the ends: thinner middle stages
      middle = (layers - 2) / (stages - 2);
      ends = layers - (stages - 2) * middle;
    }
    std::fill(sizes.begin(), sizes.end(), middle);
    sizes.front() = ends / 2;
    sizes.back() = ends - ends / 2;
  }
  std::vector<int64_t> bounds{0};
  for (int64_t size : sizes) bounds.push_back(bounds.back() + size);
  return bounds;
}

std::vector<PipelineAction> one_forward_one_backward(int64_t stage, int64_t stages,
                                                     int64_t micro_batches) {
  if (stage < 0 || stage >= stages || micro_batches < 1) {
    throw std::invalid_argument("a stage outside the pipeline, or no micro-batch");
  }
  const int64_t warmup = std::min(stages - 1 - stage, micro_batches);
  std::vector<PipelineAction> actions;
  int64_t forwards = 0;
  int64_t backwards = 0;
  while (forwards < warmup) actions.push_back({true, forwards++});
  while (forwards < micro_batches) {
    actions.push_back({true, forwards++});
    actions.push_back({false, backwards++});
  }
  while (backwards < micro_batches) actions.push_back({false, backwards++});
  return actions;
}

int64_t micro_batches_in_flight(int64_t stage, int64_t stages, int64_t micro_batches) {
  return std::min(stages - stage, micro_batches);
}

}  // namespace rematlab::parallel
