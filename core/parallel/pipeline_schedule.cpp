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
}

void PipelineSchedule::check_stage(int64_t stage) const {
  if (stage < 0 || stage >= stages_) throw std::invalid_argument("a stage outside the pipeline");
}

// A stage's order: `leading` forwards, then pairs of one forward and one backward until every
// forward ran, then the backwards left.
PipelineAction PipelineSchedule::action(int64_t stage, int64_t index) const {
  check_stage(stage);
  if (index < 0 || index >= length()) throw std::invalid_argument("an action past the schedule");
  const int64_t units = chunks_ * micro_batches_;
  const int64_t leading = warmup(stage, stages_, chunks_, micro_batches_);
  if (index < leading) return unit(index, true, stages_, chunks_);
  if (index < 2 * units - leading) {
    const int64_t paired = index - leading;
    return paired % 2 == 0 ? unit(leading + paired / 2, true, stages_, chunks_)
                           : unit(paired / 2, false, stages_, chunks_);
  }
  return unit(index - units, false, stages_, chunks_);
}

int64_t PipelineSchedule::position(int64_t stage, const PipelineAction& action) const {
  check_stage(stage);
  if (action.chunk < 0 || action.chunk >= chunks_ || action.micro_batch < 0 ||
      action.micro_batch >= micro_batches_) {
    throw std::invalid_argument("an action outside the pipeline's schedule");
  }
  // The unit index k of the action (unit()'s inverse), then where action() puts unit k.
  const int64_t round_chunk = action.forward ? action.chunk : chunks_ - 1 - action.chunk;
  const int64_t k = chunks_ == 1 ? action.micro_batch
                                 : (action.micro_batch / stages_) * stages_ * chunks_ +
                                       round_chunk * stages_ + action.micro_batch % stages_;
  const int64_t units = chunks_ * micro_batches_;
  const int64_t leading = warmup(stage, stages_, chunks_, micro_batches_);
  if (action.forward) return k < leading ? k : leading + 2 * (k - leading);
  return k < units - leading ? leading + 2 * k + 1 : units + k;
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
  if (chunks == 1) {
    // 1F1B: every unit is the one chunk, which the walk below would hold at most through its
    // warm-up and the first pair's forward (the layout planner asks this for every stage of
    // every layout it weighs).
    return weights[0] * (leading + (units > leading ? 1 : 0));
  }
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
