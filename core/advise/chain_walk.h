// One training step walked piece by piece (embedding, attn0, mlp0, …, head with its loss) with
// plain autograd, checking every piece's output, the gradient that reaches it and its parameters'
// gradients for NaN and infinity, and which parameters received no gradient at all.
//
// LibTorch C++ has no module forward hooks, so the walk runs the chain itself from the model's
// public pieces, exactly as TransformerImpl::loss does without checkpointing (a test holds the
// two equal bit for bit), and taps each output with a tensor hook for its gradient.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace rematlab::advise {

struct PieceCheck {
  std::string name;                  // "embedding", "attn0", "mlp0", …, "head"
  int64_t nonfinite_outputs = 0;     // NaN/inf elements of its forward output (head: the loss)
  double max_abs_output = 0.0;       // largest finite |value| of that output
  bool output_grad_finite = true;    // the gradient reaching its output
  std::string nonfinite_param_grad;  // the first of its parameters with a NaN/inf gradient
  double max_abs_param = 0.0;        // largest finite |weight| among its parameters
  int64_t nonfinite_params = 0;      // NaN/inf weights it already had when the step began
};

struct ChainWalk {
  std::vector<PieceCheck> pieces;
  double loss = 0.0;  // the step's loss (mean over its micro-batches)
  int64_t params_total = 0;
  std::vector<std::string> params_without_gradient;  // by their model names

  // The first piece, in forward order, whose output has a NaN or infinity.
  std::optional<std::size_t> first_nonfinite_output() const;
  // The first piece, from the loss backwards, whose own backward turned finite gradients
  // non-finite: the gradient reaching its output is finite, but the one it passes to its input
  // (the previous piece's output) or one of its parameters' is not.
  std::optional<std::size_t> first_nonfinite_backward() const;
};

// Walks the trainer's next step (its config's micro-batches, drawn from its data as step() would)
// from its current state. Leaves the gradients in the parameters; the caller discards the trainer.
ChainWalk walk_chain(Trainer& trainer);

}  // namespace rematlab::advise
