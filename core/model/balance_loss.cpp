#include "model/balance_loss.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <utility>

namespace rematlab {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kGradientKey = "rematlab.balance_gradient";
constexpr const char* kLossKey = "rematlab.balance_loss";  // an empty tensor of the loss's options

class BalanceGradient : public torch::autograd::Function<BalanceGradient> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& output,
                               const torch::Tensor& loss, double gradient) {
    ctx->saved_data[kGradientKey] = gradient;
    ctx->saved_data[kLossKey] = torch::empty({0}, loss.options());
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const double gradient = ctx->saved_data.at(kGradientKey).toDouble();
    const torch::Tensor like = ctx->saved_data.at(kLossKey).toTensor();
    return {grad_outputs.at(0), torch::full({}, gradient, like.options()), torch::Tensor()};
  }
};

}  // namespace

BalanceLedger::BalanceLedger(double coefficient, int64_t blocks)
    : coefficient_(coefficient), blocks_(blocks) {}

double BalanceLedger::block_gradient() const {
  return coefficient_ / static_cast<double>(blocks_) * gradient_scale_;
}

void BalanceLedger::record(const torch::Tensor& value) {
  const torch::Tensor detached = value.detach().to(torch::kDouble);
  sum_ = sum_.defined() ? sum_ + detached : detached;
  ++count_;
}

std::optional<double> BalanceLedger::take() {
  if (count_ == 0) return std::nullopt;
  const double mean = sum_.item<double>() / static_cast<double>(count_);
  sum_ = torch::Tensor();
  count_ = 0;
  return mean;
}

void BalanceLedger::record_load(double ratio) { load_ = std::max(load_.value_or(0.0), ratio); }

std::optional<double> BalanceLedger::take_load() { return std::exchange(load_, std::nullopt); }

void BalanceLedger::record_rank_rows(int64_t taken_here, int64_t sent) {
  rows_taken_here_ += taken_here;
  rows_sent_ += sent;
  if (sent > 0) {
    const double ratio = static_cast<double>(taken_here) / static_cast<double>(sent);
    block_rank_load_ = std::max(block_rank_load_.value_or(0.0), ratio);
  }
}

std::optional<double> BalanceLedger::take_rank_load() {
  const int64_t taken = std::exchange(rows_taken_here_, 0);
  const int64_t sent = std::exchange(rows_sent_, 0);
  if (sent == 0) return std::nullopt;
  return static_cast<double>(taken) / static_cast<double>(sent);
}

std::optional<double> BalanceLedger::take_block_rank_load() {
  return std::exchange(block_rank_load_, std::nullopt);
}

void BalanceLedger::forget() {
  take();
  take_load();
  take_rank_load();
  take_block_rank_load();
}

torch::Tensor balance_loss(const torch::Tensor& probabilities, const torch::Tensor& chosen) {
  const int64_t tokens = probabilities.size(0);
  const int64_t experts = probabilities.size(1);
  const torch::Tensor share = probabilities.to(torch::kFloat).mean(0);
  return (share * chosen.to(share.options())).sum() *
         (static_cast<double>(experts) / static_cast<double>(tokens));
}

torch::Tensor attach_balance_gradient(const torch::Tensor& output, const torch::Tensor& loss,
                                      const std::shared_ptr<BalanceLedger>& ledger) {
  if (!ledger->trains() || !torch::GradMode::is_enabled() || !loss.requires_grad()) return output;
  return BalanceGradient::apply(output, loss, ledger->block_gradient());
}

}  // namespace rematlab
