// A frozen base's projection stored quantised (--base-precision int8|nf4): its codes and scales
// become the linear layer's buffers (they move and count with the model) and its weight an empty
// tensor, so that nothing holds the full-precision values between multiplies.
#pragma once

#include <torch/torch.h>

#include <string>

#include "checkpoint/quantised_weight.h"
#include "model/lora_options.h"

namespace rematlab {

// Quantises `linear`'s weight in place as above; its bias (if any) stays as it is.
QuantisedWeightPtr quantise_projection(torch::nn::LinearImpl& linear, QuantisedFormat format);

// Whether a module's buffer (by its full name) is a quantised projection's codes or scales.
bool is_quantised_weight(const std::string& buffer_name);

}  // namespace rematlab
