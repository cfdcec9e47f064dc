// The four edges of a tensor-parallel region as autograd operations, each the other's conjugate
// in backward (Megatron's f and g, and their sequence-parallel forms):
//
//   into_region      identity          | sum over ranks     before a column-parallel layer
//   out_of_region    sum over ranks    | identity           after a row-parallel layer
//   gather_sequence  gather along seq  | sum, keep my slice before a column-parallel layer (SP)
//   scatter_sequence sum, keep my slice| gather along seq   after a row-parallel layer (SP)
//
// and split_sequence (keep my slice | gather), where a replicated tensor enters a sequence-sharded
// region. A recomputation runs them again, collectives included: every rank recomputes the same
// segments in the same order, so they meet.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "collective/tensor_parallel_group.h"

namespace rematlab {

using TensorParallel = std::shared_ptr<TensorParallelGroup>;

torch::Tensor into_region(const torch::Tensor& x, const TensorParallel& group);
torch::Tensor out_of_region(const torch::Tensor& partial, const TensorParallel& group);
// Along dimension 1 of (batch, seq, …).
torch::Tensor gather_sequence(const torch::Tensor& local, const TensorParallel& group);
torch::Tensor scatter_sequence(const torch::Tensor& partial, const TensorParallel& group);
torch::Tensor split_sequence(const torch::Tensor& whole, const TensorParallel& group);

}  // namespace rematlab
