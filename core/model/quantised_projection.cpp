#include "model/quantised_projection.h"

#include <memory>
#include <stdexcept>

namespace rematlab {

bool is_quantised(BasePrecision base) {
  return base == BasePrecision::kInt8 || base == BasePrecision::kNf4;
}

QuantisedFormat quantised_format(BasePrecision base) {
  if (base == BasePrecision::kInt8) return QuantisedFormat::kInt8;
  if (base == BasePrecision::kNf4) return QuantisedFormat::kNf4;
  throw std::logic_error("quantised_format of a base stored unquantised");
}

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
