// The last operation of a residual sublayer, residual + dropout(linear(h)), held apart so that a
// recomputation can stop before it: the backward of that operation needs only h, the residual
// stream's gradient and the dropout mask, never the projection's output (early stop).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>

#include "checkpoint/checkpoint_policy.h"
#include "checkpoint/quantised_weight.h"
#include "collective/parallel_region.h"

namespace rematlab {

struct SublayerTail {
  torch::Tensor residual;          // x, the sublayer's input
  torch::Tensor projection_input;  // h
  // The projection (out, in). Undefined for a sublayer without one projection at its end (a
  // mixture of experts): h is then the branch's output, and the tail residual + dropout(h) (with
  // sum_over: of h summed over the ranks, each having formed a part).
  torch::Tensor weight;
  torch::Tensor bias;  // undefined when it has none
  double dropout = 0.0;
  bool training = false;
  // Set when a keep: policy may keep the projection's output (kept_outputs.h).
  std::optional<KeptOutput> kept_as;
  // Row-parallel (tensor parallelism): h and the weight's columns are this rank's part, and the
  // projection's output is summed over these ranks before the bias is added.
  TensorParallel sum_over;
  // Sequence parallelism: the sum is scattered along the sequence, each rank keeping its slice
  // (the residual is that slice); h lies in `gathered_order`.
  bool scatter_sequence = false;
  GatheredOrder gathered_order = GatheredOrder::kSequence;
  // Released with the tail: what must stay alive until the projection ran (the hold a sharding
  // of the parameters keeps on the projection's weight, model/parameter_units.h).
  std::shared_ptr<void> held;
  // Fine-tuning: the term the projection's adapter adds to its output, given h (model/lora.h).
  // Empty: none.
  std::function<torch::Tensor(const torch::Tensor& h)> adapter_term;
  // A quantised base: the projection's values (`weight` then only names it). Null: none.
  QuantisedWeightPtr quantised;

  // residual + dropout(linear(h)), as the sublayer's forward computes it (with sum_over:
  // residual + dropout(Σ_ranks h·Wᵀ + bias); with an adapter: residual + dropout(linear(h) +
  // adapter_term(h))).
  torch::Tensor complete() const;
};

// The tail's output as a graph node that does not run the projection: a tensor of the output's
// shape and dtype holding one broadcast zero (no values are needed: backward never reads them)
// whose backward forms the gradients of the residual, of h and of the projection's parameters
// exactly as plain autograd would. Call it where the tail's forward ran — right after a
// recomputation reached the tail, under the RNG and autocast state of the forward, grad mode on:
// it draws the dropout mask again (dropout of ones consumes the generator as the projection's
// output did) and casts h as autocast cast it for the projection. An adapter's term is formed
// again (a rank-wide product: its backward needs its own values) and enters the node, which hands
// it the projection's gradient as the sum did; a quantised weight is dequantised again in
// backward only, as its own node does. Undefined under sequence parallelism, for a tail without a
// projection, or when an unquantised projection's operands have a layout linear_backward does not
// replicate: the caller then runs complete().
torch::Tensor tail_without_projection(const SublayerTail& tail);

}  // namespace rematlab
