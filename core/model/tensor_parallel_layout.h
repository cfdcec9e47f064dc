// How a model's parameters are laid out over tensor ranks once split (split_for_tensor_parallel
// of the Transformer and its sublayers): which parameters each rank holds a different part of,
// and which rows' gradients each rank forms only part of, to be summed over the ranks before the
// update. Everything else is replicated, and its gradient is the same on every rank.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "collective/parallel_region.h"

namespace rematlab {

struct RowRange {
  int64_t first = 0;
  int64_t count = 0;
};

struct PartialRows {
  torch::Tensor param;
  RowRange rows;
};

struct TensorParallelLayout {
  std::vector<torch::Tensor> split;
  std::vector<PartialRows> partial;
};

// Replaces the parameter's values by the rows (of dimension 0) listed, in order, or by the
// columns (dimension 1) given; the parameter stays the same tensor, as its module registered it.
void keep_rows(const torch::Tensor& param, const std::vector<RowRange>& rows);
void keep_columns(const torch::Tensor& param, RowRange columns);

// The `index`-th of `parts` equal parts of `total` rows.
RowRange part_of(int64_t total, int64_t parts, int64_t index);

}  // namespace rematlab
