// Activation memory of one training step under a checkpoint plan.
//
// Two figures. `literature_*`: the per-layer formula of Korthikanti et al. (2022),
// s·b·h·(34 + 5·a·s/h) bytes with 16-bit activations, for explicit attention, and its fused
// variant without the s×s terms — the number papers and blog posts quote. `peak`: the engine's
// own accounting, tensor by tensor (what each op keeps for backward, in the run's precision),
// replayed through forward and backward under the plan the way autograd frees it, so that under
// every:K it shows the kept segment inputs plus one segment's recomputed interior: a U-shaped
// curve over K, not the 1/K of the simple argument. docs/estimates.md compares it with the
// measured `peak_activation_bytes` and says where the two formulas part.
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/checkpoint_policy.h"
#include "common/precision.h"
#include "estimate/architecture.h"
#include "estimate/model_state.h"
#include "estimate/tensor_layout.h"

namespace rematlab::estimate {

struct ActivationInput {
  Architecture arch;
  int64_t batch = 1;
  Precision precision = Precision::kFp32;
  CheckpointPlan plan;
  bool offload = false;  // recomputed segments' saved inputs live off the device
  // AdamW's update makes two temporaries the size of the parameter it updates (the square root
  // of the second moment, and that divided by its bias correction): for a wide model at a small
  // batch, its largest weight's two copies are more than any activation.
  Optimizer optimizer = Optimizer::kAdamW;
  // One rank's share under tensor (and sequence) parallelism; the figures are that rank's.
  TensorLayout layout;
  // A pipeline stage's part of the chain (the layout planner's): whether it embeds the tokens,
  // and whether it runs the final norm, head and loss. A stage without the head starts its
  // backward from the output gradient the next stage sends; a head without the embedding keeps
  // its own copy of a tied weight, so its gradient is not held through the chain.
  bool embedding = true;
  bool head = true;
};

struct ActivationEstimate {
  int64_t saved_bytes = 0;  // kept for backward when forward ends
  int64_t peak_bytes = 0;   // the step's highest activation bytes (above the model states)
  std::string peak_phase;   // where that peak happens, e.g. "backward of [a4 m4 a5 m5]*"
  // Korthikanti et al.'s per-layer bytes for this shape (16-bit or scaled to fp32), times layers:
  // the no-checkpointing figure of the literature, embeddings and loss left out as they do.
  int64_t literature_layer_bytes = 0;
  int64_t literature_bytes = 0;
};

ActivationEstimate estimate_activations(const ActivationInput& input);

// Korthikanti et al.'s bytes per layer: explicit attention keeps the s×s scores (5·a·s/h),
// fused attention does not. fp32 doubles every 2-byte tensor; 1-byte dropout masks stay, and
// without dropout there are no masks and no dropped copy of the scores. Split over tensor ranks,
// their Table 2's per-rank forms.
int64_t literature_layer_bytes(const Architecture& arch, int64_t batch, Precision precision,
                               const TensorLayout& layout = {});

// The same paper's forms under recomputation: selective recomputes the attention core and keeps
// nothing of the s×s terms; full keeps each layer's input alone, 2·s·b·h in 16 bits (divided by t
// under sequence parallelism).
enum class LiteratureRecompute { kNone, kSelective, kFull };
int64_t literature_layer_bytes(const Architecture& arch, int64_t batch, Precision precision,
                               const TensorLayout& layout, LiteratureRecompute recompute);

// The K of every:K with the smallest estimated peak. Every K recomputes each block once, so the
// peak alone decides; ties go to the smaller K.
int64_t best_interval(const ActivationInput& input, int64_t* best_peak_bytes = nullptr);

}  // namespace rematlab::estimate
