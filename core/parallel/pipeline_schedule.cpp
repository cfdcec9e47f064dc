#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <stdexcept>

namespace rematlab::parallel {

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
