#include "parallel/tensor_parallel_exchange.h"

#include <cmath>
#include <numeric>
#include <unordered_set>

#include "common/errors.h"

namespace rematlab::parallel {

TensorParallelExchange::TensorParallelExchange(const std::shared_ptr<DistContext>& world,
                                               int tensor_ranks, DataParallelOptions data_options)
    : world_(world) {
  if (data_options.shard != ShardMode::kNone) {
    throw InvalidInput("--shard",
                       "tensor parallelism does not shard model states over the data "
                       "ranks yet");
  }
  const int rank = world->rank();
  const int data_ranks = world->world_size() / tensor_ranks;
  std::vector<int> tensor_members(static_cast<std::size_t>(tensor_ranks));
  std::iota(tensor_members.begin(), tensor_members.end(), rank / tensor_ranks * tensor_ranks);
  std::vector<int> data_members;
  for (int index = 0; index < data_ranks; ++index) {
    data_members.push_back(rank % tensor_ranks + index * tensor_ranks);
  }
  const auto tensor_context =
      world->subgroup("tensor" + std::to_string(rank / tensor_ranks), tensor_members);
  auto wait = [tensor_context](const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
    tensor_context->wait(work, what);
  };
  tensor_ = std::make_shared<TensorParallelGroup>(
      c10::intrusive_ptr<c10d::Backend>::reclaim_copy(&tensor_context->backend()), wait);
  data_ = std::make_shared<DataParallel>(
      world->subgroup("data" + std::to_string(rank % tensor_ranks), data_members), data_options);
}

void TensorParallelExchange::use_layout(TensorParallelLayout layout) {
  layout_ = std::move(layout);
  for (const torch::Tensor& param : layout_.split) split_.insert(param.unsafeGetTensorImpl());
}

void TensorParallelExchange::attach(const std::vector<torch::Tensor>& params) {
  params_ = params;
  data_->attach(params);
}

int64_t TensorParallelExchange::world_size() const { return data_->world_size(); }
int64_t TensorParallelExchange::rank() const { return data_->rank(); }

bool TensorParallelExchange::any_rank(bool local) { return world_->any(local); }

// Every tensor rank of a data rank holds the same value: the mean over the world is theirs.
double TensorParallelExchange::mean(double local) {
  return world_->sum(local) / static_cast<double>(world_->world_size());
}

void TensorParallelExchange::before_backward(bool last) { data_->before_backward(last); }

void TensorParallelExchange::after_backward(bool last) {
  data_->after_backward(last);
  if (!last) return;
  if (layout_.partial.empty()) return;
  torch::NoGradGuard no_grad;
  // One collective for all of them (under sequence parallelism every norm and bias is one).
  std::vector<torch::Tensor> rows;
  std::vector<torch::Tensor> flat;
  for (const PartialRows& partial : layout_.partial) {
    rows.push_back(partial.param.grad().narrow(0, partial.rows.first, partial.rows.count));
    flat.push_back(rows.back().reshape({-1}));
  }
  const torch::Tensor summed =
      tensor_->sum(torch::cat(flat), "summing replicated layers' gradients over tensor ranks");
  int64_t offset = 0;
  for (torch::Tensor& part : rows) {
    part.copy_(summed.narrow(0, offset, part.numel()).view_as(part));
    offset += part.numel();
  }
}

std::optional<double> TensorParallelExchange::step(torch::optim::Optimizer& optimizer,
                                                   double max_norm) {
  torch::NoGradGuard no_grad;
  double split_squares = 0.0;
  double replicated_squares = 0.0;
  for (const torch::Tensor& param : params_) {
    if (!param.grad().defined()) continue;
    const double norm = param.grad().norm().item<double>();
    (split_.count(param.unsafeGetTensorImpl()) ? split_squares : replicated_squares) += norm * norm;
  }
  // Rows every rank holds whole (shared key/value heads) inside a split parameter count once.
  for (const PartialRows& partial : layout_.partial) {
    if (!split_.count(partial.param.unsafeGetTensorImpl())) continue;  // replicated already
    const double norm = partial.param.grad()
                            .narrow(0, partial.rows.first, partial.rows.count)
                            .norm()
                            .item<double>();
    split_squares -= norm * norm;
    replicated_squares += norm * norm;
  }
  const torch::Tensor parts = tensor_->sum(
      torch::tensor({split_squares}, torch::dtype(torch::kFloat64).device(world_->device())),
      "the gradient norm over tensor ranks");
  const double total = std::sqrt(parts.item<double>() + replicated_squares);
  // As clip_grad_norm_ clips.
  if (std::isfinite(max_norm)) {
    const double coefficient = max_norm / (total + 1e-6);
    if (coefficient < 1.0) {
      for (const torch::Tensor& param : params_) {
        if (param.grad().defined()) param.grad().mul_(coefficient);
      }
    }
  }
  data_->step(optimizer, max_norm);  // unsharded: it only notes the optimizer, for its figures
  optimizer.step();
  return total;
}

void TensorParallelExchange::report(StepMetrics& metrics) {
  data_->report(metrics);
  // Every tensor-parallel collective blocks the layer that needs it: none is hidden.
  const double tensor_wait_ms = tensor_->take_wait_ms();
  metrics.comm_ms += tensor_wait_ms;
  metrics.comm_wait_ms += tensor_wait_ms;
}

}  // namespace rematlab::parallel
