// Floating-point operations of one training step (a multiply-add is two FLOPs).
//
// Model FLOPs follow Chowdhery et al. (PaLM, appendix B): forward 2·N + 4·L·s·d per token,
// backward twice that, so 6·N·tokens + 12·L·s·d·tokens a step, where N counts the weights that
// take part in a matmul (matmul_parameter_count) and the attention term counts QKᵀ and ·V over
// the full s×s square, causal mask or not. A frozen base (LoRA) forms no weight gradients and an
// input gradient only as far back as the first adapter, so its backward is about half; its
// adapters' products are counted too. Hardware FLOPs add what the checkpoint plan runs a second
// time in backward. Norms, softmax, GELU and the optimizer are left out, as usual. With the math
// attention core these are exactly the engine's matrix products (tests/test_engine_flops.cpp).
#pragma once

#include <cstdint>

#include "checkpoint/checkpoint_policy.h"
#include "estimate/architecture.h"

namespace rematlab::estimate {

struct StepFlops {
  double model = 0.0;     // forward + backward, independent of the plan
  double hardware = 0.0;  // model + recomputation under the plan
  double forward = 0.0;   // of model, the forward's (a third when every weight trains)
};

// Forward FLOPs per token of one block (projections, MLP and attention scores).
double block_forward_flops_per_token(const Architecture& arch);
// Forward FLOPs per token of the attention core alone (QKᵀ and ·V): what `selective` redoes.
double attention_core_flops_per_token(const Architecture& arch);

StepFlops step_flops(const Architecture& arch, int64_t tokens_per_step, const CheckpointPlan& plan);

// One of `tp` tensor ranks' share: the step's FLOPs divided by tp, and on top in hardware FLOPs
// what a rank runs that one process would not: the key/value projections of every head when the
// ranks share them (tp does not divide the key/value heads; forward and backward once, not again
// in a recomputed segment), and the head's forward again in the vocabulary-parallel loss's
// backward when the loss is not already in slices.
// Under sequence parallelism a recomputation runs each segment's last projection again.
StepFlops rank_step_flops(const Architecture& arch, int64_t tokens_per_step,
                          const CheckpointPlan& plan, int64_t tp, bool sequence_parallel);

// Achieved FLOP/s and the utilisations against a measured peak.
struct Utilisation {
  double achieved_flops = 0.0;  // model FLOPs per second
  double mfu = 0.0;             // achieved / peak
  double hfu = 0.0;             // hardware FLOPs per second / peak
};
Utilisation utilisation(const StepFlops& flops, double step_seconds, double peak_flops);

}  // namespace rematlab::estimate
