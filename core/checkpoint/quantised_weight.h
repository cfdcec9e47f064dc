// A frozen projection's weight stored in fewer bits (--base-precision int8|nf4): int8 with one
// scale per output row (absmax / 127), or 4-bit NormalFloat (Dettmers et al. 2023, QLoRA's data
// type) in blocks of 64 values with one fp32 absmax per block (QLoRA's second quantisation of
// those scales is not done). A projection dequantises it whenever it runs — in forward, again in
// a recomputed segment, and again in backward for its input's gradient — so no weight-sized copy
// outlives one matrix multiply.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "checkpoint/linear_backward.h"
#include "common/quantised_format.h"

namespace rematlab {

class QuantisedWeight {
 public:
  // `weight` (out, in) quantised to `format`.
  QuantisedWeight(const torch::Tensor& weight, QuantisedFormat format);

  // The weight as fp32 values: the same values every call.
  torch::Tensor dequantise() const;
  // The weight's (out, in).
  const std::vector<int64_t>& sizes() const { return sizes_; }
  // Bytes held: the codes and the scales.
  int64_t bytes() const { return codes_.nbytes() + scales_.nbytes(); }
  // For a module to hold them as buffers (they move and count with it).
  const torch::Tensor& codes() const { return codes_; }
  const torch::Tensor& scales() const { return scales_; }

 private:
  QuantisedFormat format_;
  std::vector<int64_t> sizes_;
  torch::Tensor codes_;   // int8 (out, in), or two 4-bit codes a byte
  torch::Tensor scales_;  // fp32: one per row (int8) or per block of 64 values (nf4)
};

using QuantisedWeightPtr = std::shared_ptr<const QuantisedWeight>;

// The input and bias as autocast hands them to a linear of an fp32 weight, and as `weight` an
// empty tensor of the dtype that weight is cast to: what a quantised projection multiplies in.
LinearOperands quantised_operands(const torch::Tensor& input, const torch::Tensor& bias);

// linear(input, W, bias) with W dequantised here, under autocast as autocast would cast it; the
// weight is frozen, so backward forms only the input's gradient, from W dequantised again.
torch::Tensor quantised_linear(const torch::Tensor& input, const QuantisedWeightPtr& weight,
                               const torch::Tensor& bias);

}  // namespace rematlab
