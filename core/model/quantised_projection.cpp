#include "model/quantised_projection.h"

#include <memory>

namespace rematlab {

QuantisedWeightPtr quantise_projection(torch::nn::LinearImpl& linear, QuantisedFormat format) {
  auto quantised = std::make_shared<const QuantisedWeight>(linear.weight, format);
  // The same tensors: moving the module moves them in place (set_data), so the quantised weight
  // reads them wherever they are.
  linear.register_buffer("weight_codes", quantised->codes());
  linear.register_buffer("weight_scales", quantised->scales());
  linear.weight.set_data(torch::empty({0}, linear.weight.options()));
  return quantised;
}

}  // namespace rematlab
