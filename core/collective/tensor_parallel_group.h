// The ranks that split each layer of one model between them (tensor parallelism), and the
// collectives those layers call on a c10d backend of that group alone. Each is waited for at
// once: the layer needs its result before it goes on (on Gloo the host waits; on NCCL the
// stream does, so the wait time measured here is the host's only and reads near zero there). The
// backend, and how a failed wait is reported, come from the caller (core/parallel builds the
// group), so that the model's pieces depend on c10d's types only.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace rematlab {

class TensorParallelGroup {
 public:
  // Waits for one collective; throws when the group failed. `what` names it for the message.
  using Wait = std::function<void(const c10::intrusive_ptr<c10d::Work>&, const char* what)>;

  TensorParallelGroup(c10::intrusive_ptr<c10d::Backend> backend, Wait wait);
  // Rank `rank` of `size` without a backend: splits a whole model as that rank would (to compare
  // or convert parameters); any collective on it throws.
  TensorParallelGroup(int rank, int size);

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Each returns a new tensor and leaves its input alone (a kept projection output may be it).
  torch::Tensor sum(const torch::Tensor& partial, const char* what);
  torch::Tensor max(const torch::Tensor& local, const char* what);
  // Every rank's `local` side by side along `dim` (rank order), and its converse: the sum over
  // ranks of `partial`, of which this rank keeps its slice along `dim` (sequence parallelism).
  torch::Tensor gather(const torch::Tensor& local, int64_t dim, const char* what);
  torch::Tensor sum_and_scatter(const torch::Tensor& partial, int64_t dim, const char* what);

  // The host's time waiting for collectives since the last call (all are waited on at once:
  // none is hidden under compute).
  double take_wait_ms();

 private:
  c10d::Backend& connected();
  void run(const c10::intrusive_ptr<c10d::Work>& work, const char* what);

  c10::intrusive_ptr<c10d::Backend> backend_;
  Wait wait_;
  int rank_;
  int size_;
  double wait_ms_ = 0.0;
};

}  // namespace rematlab
