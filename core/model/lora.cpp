#include "model/lora.h"

#include <cmath>
#include <string>
#include <utility>

namespace rematlab {

LoraBranchImpl::LoraBranchImpl(int64_t in_features, int64_t out_features,
                               std::vector<LoraSlice> slices, int64_t rank, double scale)
    : slices_(std::move(slices)), out_features_(out_features), rank_(rank), scale_(scale) {
  const auto count = static_cast<int64_t>(slices_.size());
  down_ = register_parameter("a", torch::empty({count * rank, in_features}));
  {
    // As torch.nn.Linear draws its weight (Kaiming-uniform with a = √5): U(±1/√in).
    torch::NoGradGuard no_grad;
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    down_.uniform_(-bound, bound);
  }
  for (std::size_t i = 0; i < slices_.size(); ++i) {
    up_.push_back(
        register_parameter("b" + std::to_string(i), torch::zeros({slices_[i].width, rank})));
  }
}

torch::Tensor LoraBranchImpl::add_to(const torch::Tensor& base, const torch::Tensor& input) const {
  // Scaled on the narrow side: rank values per token rather than the slice's width.
  const torch::Tensor reduced = torch::nn::functional::linear(input, down_) * scale_;
  auto term = [&](std::size_t i) {
    return torch::nn::functional::linear(reduced.narrow(-1, static_cast<int64_t>(i) * rank_, rank_),
                                         up_[i]);
  };
  if (slices_.size() == 1 && slices_[0].width == out_features_) return base + term(0);
  std::vector<torch::Tensor> pieces;
  int64_t at = 0;
  for (std::size_t i = 0; i < slices_.size(); ++i) {
    const LoraSlice& slice = slices_[i];
    if (slice.first > at) pieces.push_back(base.narrow(-1, at, slice.first - at));
    pieces.push_back(base.narrow(-1, slice.first, slice.width) + term(i));
    at = slice.first + slice.width;
  }
  if (at < out_features_) pieces.push_back(base.narrow(-1, at, out_features_ - at));
  return torch::cat(pieces, -1);
}

std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> adapter_of(
    const LoraBranch& branch) {
  if (!branch) return {};
  return [held = branch.ptr()](const torch::Tensor& output, const torch::Tensor& input) {
    return held->add_to(output, input);
  };
}

}  // namespace rematlab
