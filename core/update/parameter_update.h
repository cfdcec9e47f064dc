// The parameter update every step ends with, made one way for the Trainer and for the planner's
// profile, which times the update as the trainer runs it: AdamW with the run's learning rate
// and weight decay; the gradients clipped to the run's norm (none when grad_clip is 0), the step,
// and the gradients zeroed in place for the next accumulation.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "run/run_config.h"

namespace rematlab {

std::unique_ptr<torch::optim::AdamW> make_optimizer(const std::vector<torch::Tensor>& params,
                                                    const RunConfig& config);

// The largest gradient norm the run keeps (INFINITY: no clipping).
double max_grad_norm(const RunConfig& config);

// Clips to `max_norm`, steps; returns the gradients' norm before clipping.
double clip_and_step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params,
                     double max_norm);

// Scales every defined gradient of `params` as clip_grad_norm_ would for a gradient norm of
// `total` (found by the caller, e.g. over ranks): by max_norm / (total + 1e-6) where that is
// below 1; nothing with an infinite max_norm.
void clip_to_norm(const std::vector<torch::Tensor>& params, double max_norm, double total);

// Zeroes every gradient in place; one left undefined (sharded away, or never reached) is skipped.
void zero_gradients(const std::vector<torch::Tensor>& params);

}  // namespace rematlab
