#include "collective/tensor_parallel_group.h"

#include <c10/core/WrapDimMinimal.h>

#include <chrono>
#include <stdexcept>
#include <utility>
#include <vector>

namespace rematlab {

TensorParallelGroup::TensorParallelGroup(c10::intrusive_ptr<c10d::Backend> backend, Wait wait)
    : backend_(std::move(backend)),
      wait_(std::move(wait)),
      rank_(backend_->getRank()),
      size_(backend_->getSize()) {}

TensorParallelGroup::TensorParallelGroup(int rank, int size) : rank_(rank), size_(size) {}

c10d::Backend& TensorParallelGroup::connected() {
  if (!backend_) throw std::logic_error("a tensor-parallel group without a backend communicates");
  return *backend_;
}

void TensorParallelGroup::run(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  wait_(work, what);
  wait_ms_ +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

torch::Tensor TensorParallelGroup::sum(const torch::Tensor& partial, const char* what) {
  std::vector<torch::Tensor> tensors{partial.contiguous().clone()};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  run(connected().allreduce(tensors, options), what);
  return tensors.front();
}

torch::Tensor TensorParallelGroup::max(const torch::Tensor& local, const char* what) {
  std::vector<torch::Tensor> tensors{local.contiguous().clone()};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  run(connected().allreduce(tensors, options), what);
  return tensors.front();
}

torch::Tensor TensorParallelGroup::gather(const torch::Tensor& local, int64_t dim,
                                          const char* what) {
  torch::Tensor input = local.contiguous();
  // The ranks' tensors one after another along dimension 0, as the backend lays them out.
  std::vector<int64_t> sizes = input.sizes().vec();
  sizes.front() *= size();
  torch::Tensor all = torch::empty(sizes, input.options());
  run(connected()._allgather_base(all, input), what);
  if (dim == 0) return all;
  std::vector<int64_t> stacked_sizes = input.sizes().vec();
  stacked_sizes.insert(stacked_sizes.begin(), size());
  const torch::Tensor stacked = all.view(stacked_sizes);
  return torch::cat(stacked.unbind(0), dim);
}

torch::Tensor TensorParallelGroup::sum_and_scatter(const torch::Tensor& partial, int64_t dim,
                                                   const char* what) {
  dim = c10::maybe_wrap_dim(dim, partial.dim());
  TORCH_CHECK(partial.size(dim) % size() == 0, what, ": ", partial.size(dim),
              " values along dimension ", dim, " do not split evenly over ", size(), " ranks");
  // Each rank's slice along `dim` moved outermost, one after another in rank order, as the
  // collectives lay them out.
  const int64_t width = partial.size(dim) / size();
  std::vector<int64_t> split = partial.sizes().vec();
  split[static_cast<size_t>(dim)] = width;
  split.insert(split.begin() + dim, size());
  torch::Tensor slices = partial.reshape(split).movedim(dim, 0).contiguous();
  std::vector<int64_t> slice_sizes = split;
  slice_sizes.erase(slice_sizes.begin() + dim);
  if (partial.is_cuda()) {
    torch::Tensor mine = torch::empty(slice_sizes, partial.options());
    run(connected()._reduce_scatter_base(mine, slices), what);
    return mine;
  }
  // Gloo has no reduce-scatter into a tensor (its list form frees, on its own thread, a buffer it
  // allocated on the caller's, which the memory tracker would count live forever): every rank
  // sends each other rank that rank's slice and sums the slices it receives. The same bytes on
  // the wire as a reduce-scatter, half an all-reduce's.
  torch::Tensor received = torch::empty_like(slices);
  std::vector<int64_t> even;  // equal slices: no split sizes
  run(connected().alltoall_base(received, slices, even, even), what);
  slices.reset();  // sent: not held while the slices are summed
  return received.sum(0);
}

double TensorParallelGroup::take_wait_ms() { return std::exchange(wait_ms_, 0.0); }

}  // namespace rematlab
