// The four edges of a tensor-parallel region as autograd operations, each the other's conjugate
// in backward (Megatron's f and g, and their sequence-parallel forms):
//
//   into_region      identity          | sum over ranks     before a column-parallel layer
//   out_of_region    sum over ranks    | identity           after a row-parallel layer
//   gather_sequence  gather along seq  | sum, keep my slice before a column-parallel layer (SP)
//   scatter_sequence sum, keep my slice| gather along seq   after a row-parallel layer (SP)
//
// and split_sequence (keep my slice | gather), where a replicated tensor enters a sequence-sharded
// region, and its conjugate gather_whole (gather | keep my slice), where a sequence-sharded tensor
// enters replicated work whose gradient is whole, and the same, on every rank. A recomputation runs
// them again, collectives included: every rank recomputes the same segments in the same order, so
// they meet.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "collective/tensor_parallel_group.h"

namespace rematlab {

using TensorParallel = std::shared_ptr<TensorParallelGroup>;

torch::Tensor into_region(const torch::Tensor& x, const TensorParallel& group);
torch::Tensor out_of_region(const torch::Tensor& partial, const TensorParallel& group);
// How the ranks' slices of a split sequence (batch, seq / ranks, …) lie once gathered, and so how
// a sum to be scattered must lie.
enum class GatheredOrder {
  // In sequence order, (batch, seq, …): what attention needs. A copy follows the gather and
  // precedes the scatter, as the collectives lay the ranks' slices one after another.
  kSequence,
  // Rank after rank along dimension 0, (ranks × batch, seq / ranks, …), as the collectives lay
  // them: for token-wise work (the MLP), whose result does not depend on the tokens' order. No
  // copies.
  kRankMajor,
};

torch::Tensor gather_sequence(const torch::Tensor& local, const TensorParallel& group,
                              GatheredOrder order = GatheredOrder::kSequence);
// `partial` laid out as gather_sequence(…, order) lays out its result.
torch::Tensor scatter_sequence(const torch::Tensor& partial, const TensorParallel& group,
                               GatheredOrder order = GatheredOrder::kSequence);
// The dimension along which `order` lays the ranks' slices.
int64_t gathered_dim(GatheredOrder order);
// This rank's slice along dimension 1 of (batch, seq, …).
torch::Tensor split_sequence(const torch::Tensor& whole, const TensorParallel& group);
// The ranks' slices gathered as gather_sequence(…, order) lays them, for work every rank repeats
// alike (a mixture of experts' routing): backward keeps this rank's slice of the gradient, not
// the sum of the ranks' (which would count it once per rank).
torch::Tensor gather_whole(const torch::Tensor& local, const TensorParallel& group,
                           GatheredOrder order);

}  // namespace rematlab
