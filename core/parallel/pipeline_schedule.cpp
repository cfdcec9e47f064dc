#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <stdexcept>

namespace rematlab::parallel {

// The k-th forward (or backward) of a stage: under 1F1B micro-batch k; interleaved, rounds of P
// micro-batches through each chunk in turn, the chunks reversed for backwards.
PipelineAction PipelineSchedule::unit(int64_t k, bool forward, int64_t stages, int64_t chunks) {
  if (chunks == 1) return {forward, 0, k};
  const int64_t round = k % (stages * chunks);
  int64_t chunk = round / stages;
  if (!forward) chunk = chunks - 1 - chunk;
  return {forward, chunk, (k / (stages * chunks)) * stages + k % stages};
}

int64_t PipelineSchedule::warmup(int64_t stage, int64_t stages, int64_t chunks,
                                 int64_t micro_batches) {
  if (chunks == 1) return std::min(stages - 1 - stage, micro_batches);
  return std::min(2 * (stages - 1 - stage) + (chunks - 1) * stages, chunks * micro_batches);
}

PipelineSchedule::PipelineSchedule(int64_t stages, int64_t chunks, int64_t micro_batches)
    : stages_(stages), chunks_(chunks), micro_batches_(micro_batches) {
  if (stages < 1 || chunks < 1 || micro_batches < 1) {
    throw std::invalid_argument("a pipeline needs a stage, a chunk and a micro-batch");
  }
  if (chunks > 1 && micro_batches % stages != 0) {
    throw std::invalid_argument("the interleaved schedule needs micro-batches in rounds of P");
  }
  const int64_t units = chunks * micro_batches;  // forwards, and as many backwards, a stage
  for (int64_t stage = 0; stage < stages; ++stage) {
    const int64_t leading = warmup(stage, stages, chunks, micro_batches);
    std::vector<PipelineAction> actions;
    int64_t forwards = 0;
    int64_t backwards = 0;
    while (forwards < leading) actions.push_back(unit(forwards++, true, stages, chunks));
    while (forwards < units) {
      actions.push_back(unit(forwards++, true, stages, chunks));
      actions.push_back(unit(backwards++, false, stages, chunks));
    }
    while (backwards < units) actions.push_back(unit(backwards++, false, stages, chunks));
    std::vector<int64_t> positions(static_cast<std::size_t>(2 * units), -1);
    for (std::size_t at = 0; at < actions.size(); ++at) {
      positions[slot(actions[at])] = static_cast<int64_t>(at);
    }
    actions_.push_back(std::move(actions));
    positions_.push_back(std::move(positions));
  }
}

std::size_t PipelineSchedule::slot(const PipelineAction& action) const {
  if (action.chunk < 0 || action.chunk >= chunks_ || action.micro_batch < 0 ||
      action.micro_batch >= micro_batches_) {
    throw std::invalid_argument("an action outside the pipeline's schedule");
  }
  return static_cast<std::size_t>(
      ((action.forward ? 0 : 1) * chunks_ + action.chunk) * micro_batches_ + action.micro_batch);
}

const std::vector<PipelineAction>& PipelineSchedule::actions(int64_t stage) const {
  if (stage < 0 || stage >= stages_) throw std::invalid_argument("a stage outside the pipeline");
  return actions_[static_cast<std::size_t>(stage)];
}

int64_t PipelineSchedule::position(int64_t stage, const PipelineAction& action) const {
  actions(stage);  // checks the stage
  return positions_[static_cast<std::size_t>(stage)][slot(action)];
}

int64_t PipelineSchedule::most_in_flight(int64_t stage) const {
  return most_held(stages_, stage, micro_batches_, std::vector<int64_t>(chunks_, 1));
}

int64_t PipelineSchedule::most_held(int64_t stages, int64_t stage, int64_t micro_batches,
                                    const std::vector<int64_t>& weights) {
  const auto chunks = static_cast<int64_t>(weights.size());
  if (stages < 1 || stage < 0 || stage >= stages || chunks < 1 || micro_batches < 1) {
    throw std::invalid_argument("a stage outside the pipeline, or no chunk or micro-batch");
  }
  if (chunks > 1 && micro_batches % stages != 0) {
    throw std::invalid_argument("the interleaved schedule needs micro-batches in rounds of P");
  }
  const int64_t units = chunks * micro_batches;
  const int64_t leading = warmup(stage, stages, chunks, micro_batches);
  int64_t held = 0;
  int64_t most = 0;
  int64_t forwards = 0;
  auto forward = [&] {
    held += weights[static_cast<std::size_t>(unit(forwards++, true, stages, chunks).chunk)];
    most = std::max(most, held);
  };
  while (forwards < leading) forward();
  // Each pair adds the chunk of forward k and drops that of backward k − leading, both of which
  // repeat every P·V: so do the held chunks after P·V pairs. The backwards left only drop.
  const int64_t pairs = std::min(units - leading, stages * chunks + 1);
  for (int64_t pair = 0; pair < pairs; ++pair) {
    forward();
    held -= weights[static_cast<std::size_t>(unit(pair, false, stages, chunks).chunk)];
  }
  return most;
}

}  // namespace rematlab::parallel
