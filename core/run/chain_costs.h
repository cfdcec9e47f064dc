// What one training step costs, stage by stage, along the chain of residual sublayers
// (attn0, mlp0, attn1, …): the figures a checkpoint plan is chosen from. They come from
// measurement (`rematlab-cli profile`) or from a formula; the planner does not care which.
// Bytes are above the model states; parameter gradients are among those (the trainer keeps
// them between steps), so a backward's new gradient is only a transient before it is added.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace rematlab {

struct StageCost {
  double forward_ms = 0.0;   // the stage's forward, with grad
  double backward_ms = 0.0;  // its backward (recomputation excluded)
  // Of forward_ms, what an early stop saves: a recomputed segment's last stage skips its output
  // projection (its output is held already), so recomputing a segment costs its forward less
  // this of its last stage.
  double early_stop_saving_ms = 0.0;
  // What running the stage with grad keeps for its backward, its output included: freed by its
  // backward. A recomputed stage keeps this only between its recomputation and its backward.
  int64_t kept_bytes = 0;
  int64_t output_bytes = 0;  // its output, which is also the next stage's input
  // Above what it keeps: the peak of its forward (scratch freed before it returns) and of its
  // backward (both gradients of its input and output included).
  int64_t forward_transient_bytes = 0;
  int64_t backward_transient_bytes = 0;
};

struct ChainCosts {
  int64_t input_bytes = 0;        // the first stage's input (the embedding's output)
  std::vector<StageCost> stages;  // in order
  // After the chain: the head and loss (forward and backward), at their own peak above the
  // chain's last output. Last in backward, the embedding's, at its peak above the chain's input
  // (its weight's gradient is made whole before it is added to the one the step keeps).
  int64_t head_peak_bytes = 0;
  int64_t embedding_backward_peak_bytes = 0;
  double fixed_ms = 0.0;  // every step cost no plan changes (embedding, head, optimizer)
  // Of fixed_ms, the embedding's and the head and loss's forwards and backwards: the first and
  // the last pipeline stage run them beside their blocks (--pp-split balanced weighs them). NaN
  // in a profile kept before they were measured apart.
  double embedding_ms = 0.0;
  double head_ms = 0.0;
  bool has_end_times() const { return !std::isnan(embedding_ms) && !std::isnan(head_ms); }
  // A whole forward and backward under `none` over the sum of its pieces measured one by one
  // (each on hot caches): the stage, embedding and head times above are already scaled by it.
  double time_scale = 1.0;
};

// Costs measured before, for the configuration `key` names (plan/profile_key.h).
struct KnownChainCosts {
  std::string key;
  ChainCosts costs;
  double profile_ms = 0.0;  // how long measuring them took
  std::string source;       // "runs database: measured 2026-12-01T01:02:03Z"
};

}  // namespace rematlab
