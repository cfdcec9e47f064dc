// A projection's low-rank adapters: y = W·x + (α/r)·B·A·x on the slices of its output that are
// adapted (a fused projection's q, k and v, or gate and up, each its own adapter). A is drawn as
// a linear layer's weight is, B starts at zero, so the adapted model begins as its base; W stays
// frozen. The adapters of one projection share one matrix multiply for their A's (their rows
// stacked, which is the same as separate A's: each row trains on its own), so the projection's
// input is cast and kept once however many slices are adapted.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace rematlab {

struct LoraSlice {
  int64_t first = 0;  // where the adapted values begin in the projection's output
  int64_t width = 0;
};

class LoraBranchImpl : public torch::nn::Module {
 public:
  // Adapters of rank `rank` on `slices` (in order, not overlapping) of a projection from
  // `in_features` values to `out_features`.
  LoraBranchImpl(int64_t in_features, int64_t out_features, std::vector<LoraSlice> slices,
                 int64_t rank, double scale);
  // `base` (the frozen projection's output for `input`) with the adapters' terms added.
  torch::Tensor add_to(const torch::Tensor& base, const torch::Tensor& input) const;
  // The term of one adapter over the whole output (a sublayer's last projection has no other):
  // add_to(base, input) is base + term(input).
  torch::Tensor term(const torch::Tensor& input) const;

 private:
  // A·x scaled by alpha / rank for every slice at once: (…, slices · rank).
  torch::Tensor reduced(const torch::Tensor& input) const;

  std::vector<LoraSlice> slices_;
  int64_t out_features_;
  int64_t rank_;
  double scale_;
  torch::Tensor down_;             // every slice's A, stacked: (slices · rank, in)
  std::vector<torch::Tensor> up_;  // each slice's B: (width, rank)
};
TORCH_MODULE(LoraBranch);

// What a sublayer's tail calls for `branch`'s term (checkpoint/sublayer_tail.h); empty for none.
// It holds the branch: a pending recomputation never dangles.
std::function<torch::Tensor(const torch::Tensor&)> adapter_term_of(const LoraBranch& branch);

}  // namespace rematlab
