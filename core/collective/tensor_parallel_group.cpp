#include "collective/tensor_parallel_group.h"

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
  // An all-reduce, then this rank's slice: Gloo's reduce-scatter frees a buffer on its own
  // thread, which the memory tracker (frees counted on the training thread) would see as live
  // forever; NCCL could reduce-scatter, at half the traffic, for the same result.
  const torch::Tensor whole = sum(partial, what);
  const int64_t width = whole.size(dim) / size();
  return whole.narrow(dim, rank() * width, width).contiguous();
}

double TensorParallelGroup::take_wait_ms() { return std::exchange(wait_ms_, 0.0); }

}  // namespace rematlab
