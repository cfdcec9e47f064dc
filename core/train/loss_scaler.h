// Dynamic loss scaling for fp16: scale the loss so small gradients survive in half precision,
// skip the update and halve the scale when a gradient overflows, grow it after a run of good
// steps. Device-generic; the trainer enables it for fp16 only.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace rematlab {

class LossScaler {
 public:
  explicit LossScaler(double initial_scale = 65536.0, int64_t growth_interval = 2000)
      : scale_(initial_scale), growth_interval_(growth_interval) {}

  torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }
  // Divides every gradient by the scale in place; returns false when any is inf or NaN.
  bool unscale(const std::vector<torch::Tensor>& params) const;
  // After a step: halve on overflow (the step was skipped), double after growth_interval good
  // steps.
  void update(bool gradients_finite);
  double current() const { return scale_; }

 private:
  double scale_;
  int64_t growth_interval_;
  int64_t good_steps_ = 0;
};

}  // namespace rematlab
