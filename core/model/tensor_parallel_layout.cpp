#include "model/tensor_parallel_layout.h"

namespace rematlab {

void keep_rows(const torch::Tensor& param, const std::vector<RowRange>& rows) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> kept;
  for (const RowRange& range : rows) kept.push_back(param.narrow(0, range.first, range.count));
  // set_data swaps the storage under the registered parameter: optimizers and hooks made later
  // see the part only; the whole is freed here.
  torch::Tensor(param).set_data(torch::cat(kept, 0).contiguous());
}

void keep_columns(const torch::Tensor& param, RowRange columns) {
  torch::NoGradGuard no_grad;
  torch::Tensor(param).set_data(param.narrow(1, columns.first, columns.count).contiguous());
}

RowRange part_of(int64_t total, int64_t parts, int64_t index) {
  const int64_t size = total / parts;
  return {index * size, size};
}

}  // namespace rematlab
