#include "parallel/tensor_parallel_exchange.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <stdexcept>
#include <unordered_set>

#include "common/errors.h"
#include "parallel/fully_sharded.h"
#include "update/parameter_update.h"

namespace rematlab::parallel {

TensorParallelExchange::TensorParallelExchange(const std::shared_ptr<DistContext>& world,
                                               int tensor_ranks, DataParallelOptions data_options)
    : world_(world) {
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
  const auto data_context =
      world->subgroup("data" + std::to_string(rank % tensor_ranks), data_members);
  if (data_options.shard == ShardMode::kParameters) {
    data_ = std::make_shared<FullyShardedParameters>(data_context);
  } else {
    data_ = std::make_shared<DataParallel>(data_context, data_options);
  }
}

void TensorParallelExchange::use_layout(TensorParallelLayout layout) {
  layout_ = std::move(layout);
  for (const torch::Tensor& param : layout_.split) split_.insert(param.unsafeGetTensorImpl());
}

std::shared_ptr<ParameterUnits> TensorParallelExchange::shard_parameters(
    const std::vector<std::vector<torch::Tensor>>& units) {
  return data_->shard_parameters(units);
}

void TensorParallelExchange::keep_layout_of_attached() {
  // Another stage's parameters were released (TransformerImpl::keep_chunks: no gradient); any
  // other parameter left out of attach() is still the logic error index_of() names.
  auto held = [](const torch::Tensor& param) { return param.requires_grad(); };
  std::vector<torch::Tensor> split;
  std::copy_if(layout_.split.begin(), layout_.split.end(), std::back_inserter(split), held);
  std::vector<PartialRows> partial;
  std::copy_if(layout_.partial.begin(), layout_.partial.end(), std::back_inserter(partial),
               [&held](const PartialRows& rows) { return held(rows.param); });
  layout_.split = std::move(split);
  layout_.partial = std::move(partial);
}

void TensorParallelExchange::attach(const std::vector<torch::Tensor>& params) {
  params_ = params;
  keep_layout_of_attached();
  data_->attach(params);
  split_ranges_ = split_elements();
  replicated_ranges_ = replicated_elements();
  const std::vector<BucketLayout>& shards = data_->shard_layouts();
  if (shards.empty()) return;
  const int data_rank = static_cast<int>(data_->rank());
  // The norm's pieces; a parameter counted elsewhere is in none of them.
  auto counted_here = [this](std::vector<ElementRange> ranges) {
    if (!counted_elsewhere_.defined()) return ranges;
    const std::size_t elsewhere = index_of(counted_elsewhere_);
    ranges.erase(
        std::remove_if(ranges.begin(), ranges.end(),
                       [elsewhere](const ElementRange& range) { return range.param == elsewhere; }),
        ranges.end());
    return ranges;
  };
  replicated_pieces_ = pieces_in_shards(shards, data_rank, counted_here(replicated_ranges_));
  split_pieces_ = pieces_in_shards(shards, data_rank, counted_here(split_ranges_));
  partial_pieces_ = pieces_in_shards(shards, data_rank, partial_elements());
  data_->count_squares_with(
      [this](const std::vector<torch::Tensor>& grads) { return sharded_squares(grads); });
}

namespace {

ElementRange rows_of(std::size_t param, const torch::Tensor& tensor, RowRange rows) {
  const int64_t row_numel = tensor.dim() == 0 ? 1 : tensor.numel() / tensor.size(0);
  return {param, rows.first * row_numel, rows.count * row_numel};
}

}  // namespace

std::size_t TensorParallelExchange::index_of(const torch::Tensor& param) const {
  for (std::size_t index = 0; index < params_.size(); ++index) {
    if (params_[index].unsafeGetTensorImpl() == param.unsafeGetTensorImpl()) return index;
  }
  throw std::logic_error("TensorParallelExchange: a layout's parameter was not attached");
}

std::vector<ElementRange> TensorParallelExchange::replicated_elements() const {
  std::vector<ElementRange> ranges;
  for (std::size_t index = 0; index < params_.size(); ++index) {
    if (!split_.count(params_[index].unsafeGetTensorImpl())) {
      ranges.push_back({index, 0, params_[index].numel()});
    }
  }
  for (const PartialRows& partial : layout_.partial) {
    if (!split_.count(partial.param.unsafeGetTensorImpl())) continue;  // replicated already
    ranges.push_back(rows_of(index_of(partial.param), partial.param, partial.rows));
  }
  return ranges;
}

// The split parameters' elements but their rows every rank holds alike: the complement of
// replicated_elements() (padding aside), so that the norm adds the two without a subtraction.
std::vector<ElementRange> TensorParallelExchange::split_elements() const {
  std::vector<ElementRange> ranges;
  for (std::size_t index = 0; index < params_.size(); ++index) {
    const torch::Tensor& param = params_[index];
    if (!split_.count(param.unsafeGetTensorImpl())) continue;
    std::vector<ElementRange> shared;
    for (const PartialRows& partial : layout_.partial) {
      if (partial.param.unsafeGetTensorImpl() == param.unsafeGetTensorImpl()) {
        shared.push_back(rows_of(index, param, partial.rows));
      }
    }
    std::sort(shared.begin(), shared.end(),
              [](const ElementRange& a, const ElementRange& b) { return a.begin < b.begin; });
    int64_t next = 0;
    for (const ElementRange& range : shared) {
      if (range.begin > next) ranges.push_back({index, next, range.begin - next});
      next = std::max(next, range.begin + range.count);
    }
    if (param.numel() > next) ranges.push_back({index, next, param.numel() - next});
  }
  return ranges;
}

std::vector<ElementRange> TensorParallelExchange::partial_elements() const {
  std::vector<ElementRange> ranges;
  for (const PartialRows& partial : layout_.partial) {
    ranges.push_back(rows_of(index_of(partial.param), partial.param, partial.rows));
  }
  return ranges;
}

int64_t TensorParallelExchange::world_size() const { return data_->world_size(); }
int64_t TensorParallelExchange::rank() const { return data_->rank(); }

bool TensorParallelExchange::any_rank(bool local) { return world_->any(local); }

// Every tensor rank of a data rank holds the same value: the mean over the world is theirs.
double TensorParallelExchange::mean(double local) {
  return world_->sum(local) / static_cast<double>(world_->world_size());
}

std::vector<double> TensorParallelExchange::max_over_ranks(const std::vector<double>& local) {
  return world_->max(local);
}

void TensorParallelExchange::before_backward(bool last) { data_->before_backward(last); }

void TensorParallelExchange::after_backward(bool last) {
  data_->after_backward(last);
  if (!last || layout_.partial.empty()) return;
  if (data_->shard_layouts().empty()) {
    sum_partial_rows();
  } else {
    sum_partial_shards();
  }
}

namespace {

// Sums `parts` over the tensor ranks in place, in one collective (under sequence parallelism
// every norm and bias is one part).
void sum_in_place(TensorParallelGroup& tensor, const std::vector<torch::Tensor>& parts) {
  // The tensor ranks of one data rank hold the same shards of equally shaped parts: all of them
  // have parts to sum here, or none has.
  if (parts.empty()) return;
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& part : parts) flat.push_back(part.reshape({-1}));
  const torch::Tensor summed =
      tensor.sum(torch::cat(flat), "summing replicated layers' gradients over tensor ranks");
  int64_t offset = 0;
  for (const torch::Tensor& part : parts) {
    part.copy_(summed.narrow(0, offset, part.numel()).view_as(part));
    offset += part.numel();
  }
}

}  // namespace

void TensorParallelExchange::sum_partial_rows() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> rows;
  for (const PartialRows& partial : layout_.partial) {
    rows.push_back(partial.param.grad().narrow(0, partial.rows.first, partial.rows.count));
  }
  sum_in_place(*tensor_, rows);
}

void TensorParallelExchange::sum_partial_shards() {
  torch::NoGradGuard no_grad;
  sum_in_place(*tensor_, shard_views(data_->gradient_shards(), partial_pieces_));
}

// Split elements are different on every tensor rank and sum over them; replicated ones are the
// same on each and count once. The data exchange sums the result over its ranks.
double TensorParallelExchange::sharded_squares(const std::vector<torch::Tensor>& grads) const {
  return squares_over_ranks(sum_of_squares(shard_views(grads, split_pieces_)),
                            sum_of_squares(shard_views(grads, replicated_pieces_)));
}

double TensorParallelExchange::squares_over_ranks(double split, double replicated) const {
  const torch::Tensor parts =
      tensor_->sum(torch::tensor({split}, torch::dtype(torch::kFloat64).device(world_->device())),
                   "the gradient norm over tensor ranks");
  return parts.item<double>() + replicated;
}

double TensorParallelExchange::squared_norm(const torch::Tensor& except) {
  torch::NoGradGuard no_grad;
  auto views = [&](const std::vector<ElementRange>& ranges) {
    std::vector<torch::Tensor> parts;
    for (const ElementRange& range : ranges) {
      const torch::Tensor& param = params_[range.param];
      const torch::Tensor& grad = param.grad();
      if (!grad.defined() || (except.defined() && param.is_same(except))) continue;
      parts.push_back(grad.reshape({-1}).narrow(0, range.begin, range.count));
    }
    return parts;
  };
  return squares_over_ranks(sum_of_squares(views(split_ranges_)),
                            sum_of_squares(views(replicated_ranges_)));
}

std::optional<double> TensorParallelExchange::step(torch::optim::Optimizer& optimizer,
                                                   double max_norm) {
  // Sharded: the data exchange clips and steps the shards, counting the norm as
  // sharded_squares() says.
  if (!data_->shard_layouts().empty()) return data_->step(optimizer, max_norm);
  const double total = std::sqrt(squared_norm());
  clip_to_norm(params_, max_norm, total);
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
