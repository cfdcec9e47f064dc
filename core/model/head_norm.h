// Qwen 3's normalisation of each attention head's queries and keys: an RMSNorm over the head's
// values with one scale per value shared by every head, applied before the rotary positions.
// Its backward is written out (head_norm.cpp) so that it keeps the normalised values and the
// reciprocal RMS, new tensors, rather than its input: the input is a view of the fused QKV
// projection's output, which would otherwise stay alive whole for as long as the core's saved
// tensors do.
#pragma once

#include <torch/torch.h>

namespace rematlab {

// x / rms(x) · weight over the last dimension, computed in fp32, returned in x's precision.
// Keeps for backward the normalised values (in x's precision) and the reciprocal RMS (fp32).
torch::Tensor head_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

class HeadNormImpl : public torch::nn::Module {
 public:
  explicit HeadNormImpl(int64_t head_width);
  torch::Tensor forward(const torch::Tensor& x) const { return head_rms_norm(x, weight_, eps_); }
  const torch::Tensor& weight() const { return weight_; }
  double eps() const { return eps_; }

 private:
  double eps_ = 1e-5;  // the model's other norms' (an imported file's own is warned about)
  torch::Tensor weight_;
};
TORCH_MODULE(HeadNorm);

}  // namespace rematlab
