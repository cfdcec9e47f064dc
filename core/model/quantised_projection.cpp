#include "model/quantised_projection.h"

#include <memory>

namespace rematlab {
namespace {

constexpr const char* kCodes = "weight_codes";
constexpr const char* kScales = "weight_scales";

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

QuantisedWeightPtr quantise_projection(torch::nn::LinearImpl& linear, QuantisedFormat format) {
  auto quantised = std::make_shared<const QuantisedWeight>(linear.weight, format);
  // The same tensors: moving the module moves them in place (set_data), so the quantised weight
  // reads them wherever they are.
  linear.register_buffer(kCodes, quantised->codes());
  linear.register_buffer(kScales, quantised->scales());
  linear.weight.set_data(torch::empty({0}, linear.weight.options()));
  return quantised;
}

bool is_quantised_weight(const std::string& buffer_name) {
  return ends_with(buffer_name, std::string(".") + kCodes) ||
         ends_with(buffer_name, std::string(".") + kScales);
}

}  // namespace rematlab
