// A column-parallel projection under sequence parallelism that keeps only this rank's slice of
// its input for backward: the forward gathers the sequence over the tensor ranks and projects it;
// the backward gathers it again (one more all-gather) to form the weight's gradient, and sums
// and scatters the input's gradient. Keeping the gathered input instead, as gather_sequence
// followed by a linear would, holds the whole sequence for every such layer of every block on
// every rank: the one term that would not divide by T (Korthikanti et al. 2022, §4.2.2).
#pragma once

#include <torch/torch.h>

#include <optional>

#include "checkpoint/checkpoint_policy.h"
#include "checkpoint/quantised_weight.h"
#include "collective/parallel_region.h"

namespace rematlab {

// projection(which, gather_sequence(local, group, order), weight, bias), with the same gradients
// bit for bit. Where a keep: policy keeps this output, the plain route runs (inside a recomputation
// its gathered input lives only while the segment's backward runs).
torch::Tensor gathered_projection(std::optional<KeptOutput> which, const torch::Tensor& local,
                                  const torch::Tensor& weight, const torch::Tensor& bias,
                                  const TensorParallel& group,
                                  GatheredOrder order = GatheredOrder::kSequence);

// A column-parallel layer's projection of a norm's output: alone, the projection itself; split
// over tensor ranks, after the region's entry (its backward sums the input's gradient); under
// sequence parallelism, gathered_projection with the tokens in `order`. A quantised base
// (`quantised`) runs unsplit.
torch::Tensor column_projection(std::optional<KeptOutput> which, const torch::Tensor& normed,
                                const torch::Tensor& weight, const torch::Tensor& bias,
                                const TensorParallel& group, bool sequence_parallel,
                                const QuantisedWeightPtr& quantised = nullptr,
                                GatheredOrder order = GatheredOrder::kSequence);

}  // namespace rematlab
