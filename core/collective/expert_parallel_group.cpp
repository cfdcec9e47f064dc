#include "collective/expert_parallel_group.h"

#include <torch/csrc/autograd/custom_function.h>

#include <chrono>
#include <numeric>
#include <stdexcept>
#include <utility>

namespace rematlab {

ExpertParallelGroup::ExpertParallelGroup(c10::intrusive_ptr<c10d::Backend> backend, Wait wait)
    : backend_(std::move(backend)),
      wait_(std::move(wait)),
      rank_(backend_->getRank()),
      size_(backend_->getSize()) {}

ExpertParallelGroup::ExpertParallelGroup(int rank, int size) : rank_(rank), size_(size) {}

c10d::Backend& ExpertParallelGroup::connected() {
  if (!backend_) throw std::logic_error("an expert-parallel group without a backend communicates");
  return *backend_;
}

void ExpertParallelGroup::run(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  wait_(work, what);
  count_wait_since(start);
}

void ExpertParallelGroup::count_wait_since(std::chrono::steady_clock::time_point start) {
  wait_ms_ +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::vector<int64_t> ExpertParallelGroup::exchange_counts(const std::vector<int64_t>& sent,
                                                          int64_t per_rank,
                                                          const torch::Device& device,
                                                          const char* what) {
  TORCH_CHECK(static_cast<int64_t>(sent.size()) == per_rank * size_, what, ": ", sent.size(),
              " counts for ", size_, " ranks of ", per_rank);
  // On the backend's device (NCCL exchanges CUDA tensors only); read back at once, since the
  // split sizes of the exchange that follows are host integers.
  torch::Tensor outgoing =
      torch::tensor(sent, torch::TensorOptions().dtype(torch::kInt64)).to(device);
  torch::Tensor incoming = torch::empty_like(outgoing);
  std::vector<int64_t> even;
  const auto start = std::chrono::steady_clock::now();
  wait_(connected().alltoall_base(incoming, outgoing, even, even), what);
  // NCCL's wait only orders the stream: the host blocks reading the counts back, so that is
  // timed too (the routing read its own counts back just before, so little else is queued:
  // gathering the rows to send).
  const torch::Tensor host = incoming.cpu();
  count_wait_since(start);
  return {host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel()};
}

torch::Tensor ExpertParallelGroup::exchange_rows(const torch::Tensor& rows,
                                                 const std::vector<int64_t>& sent_rows,
                                                 const std::vector<int64_t>& received_rows,
                                                 const char* what) {
  TORCH_CHECK(static_cast<int>(sent_rows.size()) == size_ &&
                  static_cast<int>(received_rows.size()) == size_,
              what, ": split sizes for ", sent_rows.size(), " and ", received_rows.size(),
              " ranks in a group of ", size_);
  torch::Tensor outgoing = rows.contiguous();
  std::vector<int64_t> shape = rows.sizes().vec();
  shape.front() = std::accumulate(received_rows.begin(), received_rows.end(), int64_t{0});
  torch::Tensor incoming = torch::empty(shape, rows.options());
  std::vector<int64_t> outgoing_splits = sent_rows;
  std::vector<int64_t> incoming_splits = received_rows;
  run(connected().alltoall_base(incoming, outgoing, incoming_splits, outgoing_splits), what);
  return incoming;
}

double ExpertParallelGroup::take_wait_ms() { return std::exchange(wait_ms_, 0.0); }

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kExpertGroupKey = "rematlab.expert_parallel";
constexpr const char* kSentKey = "rematlab.sent_rows";
constexpr const char* kReceivedKey = "rematlab.received_rows";

// The group as an autograd context can hold it (a capsule of a custom class).
struct ExpertGroupHolder : torch::CustomClassHolder {
  explicit ExpertGroupHolder(ExpertParallel held) : group(std::move(held)) {}
  ExpertParallel group;
};

class DispatchRows : public torch::autograd::Function<DispatchRows> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& rows,
                               const ExpertParallel& group, const std::vector<int64_t>& sent,
                               const std::vector<int64_t>& received) {
    ctx->saved_data[kExpertGroupKey] =
        c10::IValue::make_capsule(c10::make_intrusive<ExpertGroupHolder>(group));
    ctx->saved_data[kSentKey] = sent;
    ctx->saved_data[kReceivedKey] = received;
    return group->exchange_rows(rows, sent, received, "sending tokens to their experts' ranks");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    ExpertParallelGroup& group = *c10::static_intrusive_pointer_cast<ExpertGroupHolder>(
                                      ctx->saved_data.at(kExpertGroupKey).toCapsule())
                                      ->group;
    // Back the way the rows came: what was received is sent, and the converse.
    return {group.exchange_rows(grads.at(0), ctx->saved_data.at(kReceivedKey).toIntVector(),
                                ctx->saved_data.at(kSentKey).toIntVector(),
                                "sending rows' gradients back to their tokens' ranks"),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor dispatch_rows(const torch::Tensor& rows, const ExpertParallel& group,
                            const std::vector<int64_t>& sent_rows,
                            const std::vector<int64_t>& received_rows) {
  return DispatchRows::apply(rows, group, sent_rows, received_rows);
}

}  // namespace rematlab
