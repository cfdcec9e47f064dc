#include "parallel/expert_parallel_exchange.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "update/parameter_update.h"

namespace rematlab::parallel {

ExpertParallelExchange::ExpertParallelExchange(const std::shared_ptr<DistContext>& world,
                                               int expert_ranks, DataParallelOptions data_options)
    : replicated_(std::make_shared<DataParallel>(world, data_options)) {
  const int rank = world->rank();
  const int groups = world->world_size() / expert_ranks;
  std::vector<int> group_members(static_cast<std::size_t>(expert_ranks));
  std::iota(group_members.begin(), group_members.end(), rank / expert_ranks * expert_ranks);
  group_context_ = world->subgroup("experts" + std::to_string(rank / expert_ranks), group_members);
  auto wait = [context = group_context_](const c10::intrusive_ptr<c10d::Work>& work,
                                         const char* what) { context->wait(work, what); };
  experts_ = std::make_shared<ExpertParallelGroup>(
      c10::intrusive_ptr<c10d::Backend>::reclaim_copy(&group_context_->backend()), wait);
  if (groups > 1) {
    std::vector<int> replica_members;
    for (int group = 0; group < groups; ++group) {
      replica_members.push_back(rank % expert_ranks + group * expert_ranks);
    }
    expert_replicas_ = std::make_shared<DataParallel>(
        world->subgroup("expert_replicas" + std::to_string(rank % expert_ranks), replica_members),
        data_options);
  }
}

void ExpertParallelExchange::use_experts(std::vector<torch::Tensor> held) {
  for (const torch::Tensor& param : held) held_.insert(param.unsafeGetTensorImpl());
}

void ExpertParallelExchange::attach(const std::vector<torch::Tensor>& params) {
  params_ = params;
  for (const torch::Tensor& param : params) {
    (held_.count(param.unsafeGetTensorImpl()) ? expert_params_ : replicated_params_)
        .push_back(param);
  }
  // An expert left out would be averaged over every data rank as if replicated: wrong, silently.
  if (expert_params_.size() != held_.size()) {
    throw std::logic_error("expert parallelism: " + std::to_string(held_.size()) +
                           " expert parameters held, " + std::to_string(expert_params_.size()) +
                           " of them among the model's");
  }
  replicated_->attach(replicated_params_);
  if (expert_replicas_) expert_replicas_->attach(expert_params_);
}

void ExpertParallelExchange::before_backward(bool last) {
  replicated_->before_backward(last);
  if (expert_replicas_) expert_replicas_->before_backward(last);
}

void ExpertParallelExchange::after_backward(bool last) {
  replicated_->after_backward(last);
  if (expert_replicas_) expert_replicas_->after_backward(last);
  if (!last) return;
  // Each expert's gradient summed its group's E ranks' rows, each rank's already a mean over its
  // own: the mean over every data rank is that sum, averaged over the groups, over E.
  torch::NoGradGuard no_grad;
  const double share = 1.0 / static_cast<double>(experts_->size());
  for (const torch::Tensor& param : expert_params_) param.mutable_grad().mul_(share);
}

std::optional<double> ExpertParallelExchange::step(torch::optim::Optimizer& optimizer,
                                                   double max_norm) {
  optimizer_ = &optimizer;
  double squares = 0.0;
  {
    torch::NoGradGuard no_grad;
    auto grads_of = [](const std::vector<torch::Tensor>& params) {
      std::vector<torch::Tensor> grads;
      for (const torch::Tensor& param : params) {
        if (param.grad().defined()) grads.push_back(param.grad());
      }
      return grads;
    };
    // Every rank holds the replicated gradients alike; the experts' are spread over the group,
    // and every group holds the same after averaging.
    squares = sum_of_squares(grads_of(replicated_params_)) +
              group_context_->sum(sum_of_squares(grads_of(expert_params_)));
  }
  const double total = std::sqrt(squares);
  clip_to_norm(params_, max_norm, total);
  optimizer.step();
  return total;
}

void ExpertParallelExchange::report(StepMetrics& metrics) {
  replicated_->report(metrics);
  if (expert_replicas_) {
    StepMetrics replicas;
    expert_replicas_->report(replicas);
    // The two averages run side by side during backward: the longer of them bounds the step's,
    // but the step waits on one after the other, so it lasted at least their waits together
    // (what was waited for stays within what was communicated).
    metrics.comm_wait_ms += replicas.comm_wait_ms;
    metrics.comm_ms = std::max({metrics.comm_ms, replicas.comm_ms, metrics.comm_wait_ms});
  }
  // Every exchange blocks the block that needs it: none is hidden.
  const double dispatch_ms = experts_->take_wait_ms();
  metrics.dispatch_ms = dispatch_ms;
  metrics.comm_ms += dispatch_ms;
  metrics.comm_wait_ms += dispatch_ms;

  ModelStateBytes bytes;
  for (const torch::Tensor& param : params_) {
    bytes.params += static_cast<int64_t>(param.nbytes());
    if (param.grad().defined()) bytes.grads += static_cast<int64_t>(param.grad().nbytes());
  }
  if (optimizer_) bytes.optimizer = optimizer_state_bytes(*optimizer_);
  state_bytes_ = bytes;
}

int64_t ExpertParallelExchange::buffer_peak_bytes() const {
  return replicated_->buffer_peak_bytes() +
         (expert_replicas_ ? expert_replicas_->buffer_peak_bytes() : 0);
}

}  // namespace rematlab::parallel
