#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <utility>

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

void PipelineSchedule::check_walk(int64_t stages, int64_t stage, int64_t micro_batches,
                                  int64_t chunks) {
  if (stages < 1 || stage < 0 || stage >= stages || chunks < 1 || micro_batches < 1) {
    throw std::invalid_argument("a stage outside the pipeline, or no chunk or micro-batch");
  }
  if (chunks > 1 && micro_batches % stages != 0) {
    throw std::invalid_argument("the interleaved schedule needs micro-batches in rounds of P");
  }
}

int64_t PipelineSchedule::most_held(int64_t stages, int64_t stage, int64_t micro_batches,
                                    const std::vector<int64_t>& weights) {
  const auto chunks = static_cast<int64_t>(weights.size());
  check_walk(stages, stage, micro_batches, chunks);
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

int64_t PipelineSchedule::peak_with_backward(int64_t stages, int64_t stage, int64_t micro_batches,
                                             const std::vector<int64_t>& saved,
                                             const std::vector<int64_t>& rises) {
  const auto chunks = static_cast<int64_t>(saved.size());
  check_walk(stages, stage, micro_batches, chunks);
  if (rises.size() != saved.size()) throw std::invalid_argument("a rise for every chunk");
  const int64_t units = chunks * micro_batches;
  const int64_t leading = warmup(stage, stages, chunks, micro_batches);
  int64_t held = 0;
  int64_t most = 0;
  int64_t forwards = 0;
  int64_t backwards = 0;
  auto forward = [&] {
    held += saved[static_cast<std::size_t>(unit(forwards++, true, stages, chunks).chunk)];
  };
  auto backward = [&] {
    const auto chunk = static_cast<std::size_t>(unit(backwards++, false, stages, chunks).chunk);
    most = std::max(most, held + rises[chunk]);
    held -= saved[chunk];
  };
  while (forwards < leading) forward();
  // Each pair adds forward k's chunk and drops backward k − leading's, both of which repeat every
  // P·V pairs: so do the passes held and each backward's rise. One period is walked; the drain
  // then starts from where the last pair leaves the period.
  const int64_t pairs = units - leading;
  const int64_t period = stages * chunks;
  std::vector<int64_t> held_after{held};  // after 0, 1, … pairs of the period
  for (int64_t pair = 0; pair < std::min(pairs, period); ++pair) {
    forward();
    backward();
    held_after.push_back(held);
  }
  held = held_after[static_cast<std::size_t>(pairs <= period ? pairs : pairs % period)];
  backwards = pairs;
  while (backwards < units) backward();  // the drain, which may rise higher than any pair
  return most;
}

namespace {

// One action of a stage's order, as the walk reads it.
struct Pass {
  int32_t chunk = 0;
  int32_t micro_batch = 0;
  bool forward = true;
};
using Orders = std::vector<std::vector<Pass>>;

// Every stage's order for the walk. The layout planner walks a few shapes for many layouts (each
// search on its own thread): orders are kept per thread up to 2^21 passes in all (24 MiB), and
// all let go when one more would pass that; an order larger than that is made for its walk
// alone.
std::shared_ptr<const Orders> orders_for(int64_t stages, int64_t chunks, int64_t micro_batches) {
  constexpr int64_t kMostKept = int64_t{1} << 21;
  thread_local std::map<std::tuple<int64_t, int64_t, int64_t>, std::shared_ptr<const Orders>> kept;
  thread_local int64_t kept_passes = 0;
  const auto key = std::make_tuple(stages, chunks, micro_batches);
  const auto found = kept.find(key);
  if (found != kept.end()) return found->second;
  const PipelineSchedule schedule(stages, chunks, micro_batches);
  auto orders = std::make_shared<Orders>(static_cast<std::size_t>(stages));
  for (int64_t stage = 0; stage < stages; ++stage) {
    auto& order = (*orders)[static_cast<std::size_t>(stage)];
    order.reserve(static_cast<std::size_t>(schedule.length()));
    for (int64_t index = 0; index < schedule.length(); ++index) {
      const PipelineAction action = schedule.action(stage, index);
      order.push_back({static_cast<int32_t>(action.chunk), static_cast<int32_t>(action.micro_batch),
                       action.forward});
    }
  }
  const int64_t passes = stages * schedule.length();
  if (passes > kMostKept) return orders;
  if (kept_passes + passes > kMostKept) {
    kept.clear();
    kept_passes = 0;
  }
  kept_passes += passes;
  return kept.emplace(key, std::move(orders)).first->second;
}

}  // namespace

double PipelineSchedule::play(int64_t micro_batches,
                              const std::vector<std::vector<double>>& forward,
                              const std::vector<std::vector<double>>& backward) {
  const auto stages = static_cast<int64_t>(forward.size());
  const auto chunks = static_cast<int64_t>(forward.front().size());
  const std::shared_ptr<const Orders> orders = orders_for(stages, chunks, micro_batches);
  const int64_t passes = stages * chunks;  // the chain's chunks
  // When each chain chunk's forward and backward of each micro-batch ended (< 0: not yet): one
  // buffer a thread for the thousands of walks of a search, let go after a walk of more than
  // 2^20 passes.
  thread_local std::vector<double> forward_end;
  thread_local std::vector<double> backward_end;
  forward_end.assign(static_cast<std::size_t>(passes * micro_batches), -1.0);
  backward_end.assign(forward_end.size(), -1.0);
  struct LetGo {
    ~LetGo() {
      if (forward_end.size() > (std::size_t{1} << 20)) {
        std::vector<double>().swap(forward_end);
        std::vector<double>().swap(backward_end);
      }
    }
  } let_go;
  auto at = [micro_batches](int64_t chain_chunk, int64_t micro_batch) {
    return static_cast<std::size_t>(chain_chunk * micro_batches + micro_batch);
  };
  std::vector<std::size_t> next(static_cast<std::size_t>(stages), 0);
  std::vector<double> free(static_cast<std::size_t>(stages), 0.0);
  // Each stage runs its order as far as its neighbours allow, in turns, until all have run it
  // (the order never waits in a cycle: tests/test_pipeline.cpp).
  for (bool moved = true; moved;) {
    moved = false;
    for (int64_t stage = 0; stage < stages; ++stage) {
      const auto s = static_cast<std::size_t>(stage);
      const std::vector<Pass>& order = (*orders)[s];
      for (; next[s] < order.size(); ++next[s]) {
        const Pass& pass = order[next[s]];
        const int64_t chain_chunk = pass.chunk * stages + stage;
        const int64_t m = pass.micro_batch;
        const double ready = pass.forward
                                 ? (chain_chunk == 0 ? 0.0 : forward_end[at(chain_chunk - 1, m)])
                             : chain_chunk + 1 == passes ? forward_end[at(chain_chunk, m)]
                                                         : backward_end[at(chain_chunk + 1, m)];
        if (ready < 0.0) break;
        const auto c = static_cast<std::size_t>(pass.chunk);
        free[s] = std::max(free[s], ready) + (pass.forward ? forward[s][c] : backward[s][c]);
        (pass.forward ? forward_end : backward_end)[at(chain_chunk, m)] = free[s];
        moved = true;
      }
    }
  }
  for (std::size_t stage = 0; stage < next.size(); ++stage) {
    if (next[stage] < (*orders)[stage].size()) {
      throw std::logic_error("a pipeline order that waits in a cycle");
    }
  }
  return *std::max_element(free.begin(), free.end());
}

double PipelineSchedule::walked_step_seconds(int64_t micro_batches,
                                             const std::vector<std::vector<double>>& forward,
                                             const std::vector<std::vector<double>>& backward) {
  const auto stages = static_cast<int64_t>(forward.size());
  const bool whole =
      stages >= 1 && backward.size() == forward.size() && !forward.front().empty() &&
      std::all_of(forward.begin(), forward.end(),
                  [&](const auto& row) { return row.size() == forward[0].size(); }) &&
      std::all_of(backward.begin(), backward.end(),
                  [&](const auto& row) { return row.size() == forward[0].size(); });
  if (!whole) throw std::invalid_argument("a pass time for every stage and chunk");
  const auto chunks = static_cast<int64_t>(forward.front().size());
  const int64_t settled = (chunks + 4) * stages;
  if (micro_batches <= settled + stages) return play(micro_batches, forward, backward);
  const double at_settled = play(settled, forward, backward);
  const double one_round_more = play(settled + stages, forward, backward);
  const double rounds =
      static_cast<double>(micro_batches - settled - stages) / static_cast<double>(stages);
  return one_round_more + rounds * (one_round_more - at_settled);
}

}  // namespace rematlab::parallel
