// How the model lets a sharding of its parameters (ZeRO-3, core/parallel/fully_sharded.h) keep
// each of them whole only while it is used. The model's parameters fall into units: unit 0 holds
// everything outside the sublayers (the embeddings, the final norm, the head), unit 1 + i the
// parameters of sublayer i. The model calls gather() before a unit runs, forward or in a
// recomputation, and release() after; backward gathers a released unit again through the hook
// release() leaves on the unit's output.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <memory>

namespace rematlab {

class ParameterUnits {
 public:
  virtual ~ParameterUnits() = default;

  // Returns once every parameter of `unit` holds its whole value.
  virtual void gather(std::size_t unit) = 0;
  // The unit's forward produced `output`: its parameters may be freed. Returns `output`; where it
  // requires grad, its gradient gathers the unit again before the unit's backward runs.
  virtual torch::Tensor release(std::size_t unit, const torch::Tensor& output) = 0;
  // The unit stays whole while the returned handle lives (a sublayer's tail, whose projection
  // runs after the sublayer returned), then is freed: a recomputation's last unit, whose
  // backward comes next, is not given one and stays whole until its gradients are reduced.
  virtual std::shared_ptr<void> hold(std::size_t unit) = 0;
};

}  // namespace rematlab
