#include "model/lora.h"

#include <cmath>
#include <string>
#include <utility>

namespace rematlab {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// `base` with each term added into its slice of the last dimension. Written out because
// autograd through narrow, add and cat gives `base` a gradient as wide as itself from every
// slice (zeros around it) and sums them; here base's gradient is the output's as it is, and each
// term's a view of it. No tensor is saved.
class AddIntoSlices : public torch::autograd::Function<AddIntoSlices> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& base,
                               at::TensorList terms, const std::vector<int64_t>& firsts) {
    std::vector<int64_t> widths;
    torch::Tensor out = base.clone();
    for (std::size_t i = 0; i < terms.size(); ++i) {
      widths.push_back(terms[i].size(-1));
      out.narrow(-1, firsts[i], widths.back()).add_(terms[i]);
    }
    ctx->saved_data["firsts"] = firsts;
    ctx->saved_data["widths"] = widths;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const std::vector<int64_t> firsts = ctx->saved_data.at("firsts").toIntVector();
    const std::vector<int64_t> widths = ctx->saved_data.at("widths").toIntVector();
    const torch::Tensor& grad = grad_outputs.at(0);
    variable_list grads = {grad};
    for (std::size_t i = 0; i < firsts.size(); ++i) {
      grads.push_back(grad.narrow(-1, firsts[i], widths[i]));
    }
    grads.push_back(torch::Tensor());  // the firsts: no tensor
    return grads;
  }
};

}  // namespace

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

// Scaled on the narrow side: rank values per token rather than the slice's width.
torch::Tensor LoraBranchImpl::reduced(const torch::Tensor& input) const {
  return torch::nn::functional::linear(input, down_) * scale_;
}

torch::Tensor LoraBranchImpl::term(const torch::Tensor& input) const {
  TORCH_CHECK(slices_.size() == 1 && slices_[0].width == out_features_,
              "an adapter's term over the whole output asked of a sliced projection");
  return torch::nn::functional::linear(reduced(input), up_[0]);
}

torch::Tensor LoraBranchImpl::add_to(const torch::Tensor& base, const torch::Tensor& input) const {
  if (slices_.size() == 1 && slices_[0].width == out_features_) return base + term(input);
  const torch::Tensor low = reduced(input);
  std::vector<torch::Tensor> terms;
  for (std::size_t i = 0; i < slices_.size(); ++i) {
    const auto first_row = static_cast<int64_t>(i) * rank_;
    terms.push_back(torch::nn::functional::linear(low.narrow(-1, first_row, rank_), up_[i]));
  }
  std::vector<int64_t> firsts;
  for (const LoraSlice& slice : slices_) firsts.push_back(slice.first);
  return AddIntoSlices::apply(base, at::TensorList(terms), firsts);
}

std::function<torch::Tensor(const torch::Tensor&)> adapter_term_of(const LoraBranch& branch) {
  if (!branch) return {};
  return [held = branch.ptr()](const torch::Tensor& input) { return held->term(input); };
}

}  // namespace rematlab
