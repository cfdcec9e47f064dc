// The ranks that split a mixture of experts' experts between them (expert parallelism), and the
// all-to-all exchanges that carry each token's rows to the rank holding its expert and the
// expert's outputs back. Rank r of E holds experts [r·X/E, (r+1)·X/E) of X. Like the tensor
// group, each exchange is waited for at once (the experts need their rows), and the backend and
// how a failed wait is reported come from core/parallel, which builds the group.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <vector>

namespace rematlab {

class ExpertParallelGroup {
 public:
  using Wait = std::function<void(const c10::intrusive_ptr<c10d::Work>&, const char* what)>;

  ExpertParallelGroup(c10::intrusive_ptr<c10d::Backend> backend, Wait wait);
  // Rank `rank` of `size` without a backend: keeps the experts that rank would (for tests that
  // compare a rank's part with one process's model); any exchange on it throws.
  ExpertParallelGroup(int rank, int size);

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The first of the experts rank `rank` holds, and how many each rank holds, of `experts`.
  int64_t first_expert(int64_t experts, int rank) const { return experts / size_ * rank; }
  int64_t experts_per_rank(int64_t experts) const { return experts / size_; }

  // Every rank sends `per_rank` counts to each rank (`sent`: size() × per_rank, destination
  // after destination) and receives as many from each (source after source).
  std::vector<int64_t> exchange_counts(const std::vector<int64_t>& sent, int64_t per_rank,
                                       const torch::Device& device, const char* what);
  // `rows` (sent_rows summed, d): sent_rows[r] of them, in order, to rank r; returns the rows
  // received, received_rows[s] from rank s, source after source.
  torch::Tensor exchange_rows(const torch::Tensor& rows, const std::vector<int64_t>& sent_rows,
                              const std::vector<int64_t>& received_rows, const char* what);

  // The host's time waiting for exchanges since the last call. On CUDA the rows' exchanges are
  // queued on the stream (the experts' kernels wait there, not the host): what it counts there
  // is the count exchanges, which the host reads back.
  double take_wait_ms();

 private:
  c10d::Backend& connected();
  void run(const c10::intrusive_ptr<c10d::Work>& work, const char* what);
  void count_wait_since(std::chrono::steady_clock::time_point start);

  c10::intrusive_ptr<c10d::Backend> backend_;
  Wait wait_;
  int rank_;
  int size_;
  double wait_ms_ = 0.0;
};

using ExpertParallel = std::shared_ptr<ExpertParallelGroup>;

// exchange_rows as an autograd operation: its backward sends each row's gradient back the way
// the row came (the converse exchange). A recomputation runs it again; every rank recomputes the
// same segments in the same order, so the exchanges meet.
torch::Tensor dispatch_rows(const torch::Tensor& rows, const ExpertParallel& group,
                            const std::vector<int64_t>& sent_rows,
                            const std::vector<int64_t>& received_rows);

}  // namespace rematlab
