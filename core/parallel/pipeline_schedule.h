// Pipeline parallelism's plan of work, apart from any tensor: the order in which each stage runs
// its micro-batches' forward and backward passes through its model chunks (which blocks a chunk
// holds: checkpoint/stage_blocks.h).
#pragma once

#include <cstdint>
#include <vector>

namespace rematlab::parallel {

struct PipelineAction {
  bool forward = true;
  int64_t chunk = 0;  // which of the stage's model chunks: 0 without virtual stages
  int64_t micro_batch = 0;
};

// P stages of V model chunks each: chunk c of stage s is virtual stage c·P + s of the chain's
// P·V, so a micro-batch passes every stage V times, from the last back to the first between
// rounds. With V = 1 the schedule is 1F1B: stage s first runs the forwards of min(P − 1 − s, M)
// micro-batches, then alternates one forward and one backward, then runs the backwards left.
// With V > 1 it is interleaved 1F1B (Narayanan et al. 2021): forwards go through the chunks in
// rounds of P micro-batches (chunk 0 for micro-batches 0…P−1, chunk 1 for the same, …, then
// chunk 0 for P…2P−1), backwards the same rounds with the chunks reversed; stage s runs
// 2(P − 1 − s) + (V − 1)·P forwards before its first backward. Needs M a multiple of P.
// Within a chunk both kinds run in micro-batch order, so every parameter's gradients accumulate
// in the order one process adds them. Sends return at once and receives wait: under that rule
// no stage waits on another in a cycle (tests/test_pipeline.cpp plays every stage's order).
class PipelineSchedule {
 public:
  // Throws std::invalid_argument for no stage, chunk or micro-batch, or M not a multiple of P
  // with V > 1 (run_config's validate says so in the user's words first). Holds no order: each
  // action is computed where it is asked for, so a step of a million micro-batches costs no
  // memory here.
  PipelineSchedule(int64_t stages, int64_t chunks, int64_t micro_batches);

  int64_t stages() const { return stages_; }
  int64_t chunks() const { return chunks_; }
  int64_t micro_batches() const { return micro_batches_; }
  // Every stage runs 2·V·M actions; the index-th of `stage`'s order.
  int64_t length() const { return 2 * chunks_ * micro_batches_; }
  PipelineAction action(int64_t stage, int64_t index) const;
  // Where `action` comes in `stage`'s order (the inverse of action()).
  int64_t position(int64_t stage, const PipelineAction& action) const;
  // The most (chunk, micro-batch) pairs whose forward ran and whose backward did not, at once,
  // on `stage`: min(P − s, M) under 1F1B, min(2(P − 1 − s) + (V − 1)·P + 1, V·M) interleaved.
  // A chunk holds 1/V of the stage's blocks, so the first stage keeps about
  // P·(1 + (P − 1)/(P·V)) micro-batches' activations of its blocks instead of P.
  int64_t most_in_flight(int64_t stage) const;

  // The most of `weights` (one a chunk: its blocks, say) held at once on `stage`: the largest
  // Σ_c held_c · weights[c] over its order, right after a forward. Chunks of unequal size peak
  // below most_in_flight × the largest. Walks the order only as far as it can rise (the layout
  // planner asks for thousands of layouts): past the warm-up the held chunks repeat every P·V
  // pairs.
  static int64_t most_held(int64_t stages, int64_t stage, int64_t micro_batches,
                           const std::vector<int64_t>& weights);
  // The seconds from a step's first forward to the last stage's last backward when each pass
  // takes its own time (forward[s][c], backward[s][c]: one micro-batch through stage s's chunk
  // c) and starts once its stage is free and its neighbour's pass has ended (transfers inside
  // the passes' times): every stage's order played against the others'. Unequal chunks idle
  // the stages beyond the (P − 1)/V of a micro-batch an even pipeline's fill and drain cost.
  // Past (V + 5)·P micro-batches the step grows at the rate the walks of (V + 4)·P and (V + 5)·P
  // give (within 2 % of the whole walk for passes drawn at random; exact for even ones).
  static double walked_step_seconds(int64_t micro_batches,
                                    const std::vector<std::vector<double>>& forward,
                                    const std::vector<std::vector<double>>& backward);

  // The highest point of `stage`'s activations over its order when each chunk saves
  // `saved[c]` a pass and rises `rises[c]` above that during its backward: before each backward
  // the passes held and that backward's rise (what the planner predicts for a stage whose chunks
  // are under policies of their own). One chunk: saved · most_in_flight + its rise.
  static int64_t peak_with_backward(int64_t stages, int64_t stage, int64_t micro_batches,
                                    const std::vector<int64_t>& saved,
                                    const std::vector<int64_t>& rises);

 private:
  void check_stage(int64_t stage) const;
  static void check_walk(int64_t stages, int64_t stage, int64_t micro_batches, int64_t chunks);
  // walked_step_seconds for exactly `micro_batches`.
  static double play(int64_t micro_batches, const std::vector<std::vector<double>>& forward,
                     const std::vector<std::vector<double>>& backward);
  // The k-th forward (or backward) and the forwards stage s runs before its first backward.
  static PipelineAction unit(int64_t k, bool forward, int64_t stages, int64_t chunks);
  static int64_t warmup(int64_t stage, int64_t stages, int64_t chunks, int64_t micro_batches);

  int64_t stages_;
  int64_t chunks_;
  int64_t micro_batches_;
};

}  // namespace rematlab::parallel
