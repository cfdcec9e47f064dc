#include "checkpoint/quantised_weight.h"

#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "checkpoint/linear_backward.h"

namespace rematlab {
namespace {

// NormalFloat4's 16 levels: quantiles of a standard normal scaled to [-1, 1], with an exact zero
// (the values published with QLoRA).
constexpr std::array<float, 16> kNf4Levels = {-1.0f,
                                              -0.6961928009986877f,
                                              -0.5250730514526367f,
                                              -0.39491748809814453f,
                                              -0.28444138169288635f,
                                              -0.18477343022823334f,
                                              -0.09105003625154495f,
                                              0.0f,
                                              0.07958029955625534f,
                                              0.16093020141124725f,
                                              0.24611230194568634f,
                                              0.33791524171829224f,
                                              0.44070982933044434f,
                                              0.5626170039176941f,
                                              0.7229568362236023f,
                                              1.0f};

// Every byte's two levels (high nibble first), so that decoding reads one table row a byte.
const std::array<float, 512>& nf4_pair_values() {
  static const std::array<float, 512> kPairs = [] {
    std::array<float, 512> pairs{};
    for (std::size_t byte = 0; byte < 256; ++byte) {
      pairs[2 * byte] = kNf4Levels[byte / 16];
      pairs[2 * byte + 1] = kNf4Levels[byte % 16];
    }
    return pairs;
  }();
  return kPairs;
}

// The tables as tensors over the constants above: on the CPU views of static memory, never
// allocated (so they are no model state a run counts); elsewhere one copy per device, made once
// (copying from the host at every dequantisation would make a GPU wait four times a layer).
torch::Tensor on_device(const float* values, at::IntArrayRef sizes, const torch::Device& device) {
  const torch::Tensor host = torch::from_blob(const_cast<float*>(values), sizes, torch::kFloat);
  if (device.is_cpu()) return host;
  static std::mutex mutex;
  static std::map<std::pair<const float*, std::string>, torch::Tensor> copies;
  const std::lock_guard<std::mutex> lock(mutex);
  torch::Tensor& copy = copies[{values, device.str()}];
  if (!copy.defined()) copy = host.to(device);
  return copy;
}

torch::Tensor nf4_levels(const torch::Device& device) {
  return on_device(kNf4Levels.data(), {16}, device);
}

torch::Tensor nf4_pairs(const torch::Device& device) {
  return on_device(nf4_pair_values().data(), {256, 2}, device);
}

int64_t block_count(int64_t values) { return (values + kNf4BlockSize - 1) / kNf4BlockSize; }

// Each value to its nearest level (ties to the lower), as 4-bit codes packed two a byte.
std::pair<torch::Tensor, torch::Tensor> quantise_nf4(const torch::Tensor& weight) {
  const int64_t values = weight.numel();
  const int64_t blocks = block_count(values);
  torch::Tensor flat =
      torch::zeros({blocks * kNf4BlockSize}, weight.options().dtype(torch::kFloat));
  flat.narrow(0, 0, values).copy_(weight.reshape({-1}));
  const torch::Tensor grouped = flat.view({blocks, kNf4BlockSize});
  torch::Tensor absmax = grouped.abs().amax(1);
  // An all-zero block keeps a scale of 1 (its codes are the zero level whatever it is).
  absmax = torch::where(absmax > 0, absmax, torch::ones_like(absmax));
  const torch::Tensor normalised = (grouped / absmax.unsqueeze(1)).reshape({-1});
  const torch::Tensor levels = nf4_levels(weight.device());
  const torch::Tensor midpoints = (levels.slice(0, 0, 15) + levels.slice(0, 1, 16)) / 2;
  const torch::Tensor codes = torch::bucketize(normalised, midpoints).to(torch::kUInt8);
  const torch::Tensor pairs = codes.view({-1, 2});
  const torch::Tensor packed = pairs.select(1, 0) * 16 + pairs.select(1, 1);
  return {packed.to(torch::kUInt8), absmax};
}

// Lean on purpose (it runs for every projection, forward and backward): a 4-byte index a byte of
// codes and the fp32 result, scaled in place.
torch::Tensor dequantise_nf4(const torch::Tensor& packed, const torch::Tensor& absmax,
                             at::IntArrayRef sizes) {
  const torch::Tensor pairs = nf4_pairs(packed.device());
  torch::Tensor values = pairs.index_select(0, packed.to(torch::kInt));
  values.view({-1, kNf4BlockSize}).mul_(absmax.unsqueeze(1));
  int64_t count = 1;
  for (const int64_t size : sizes) count *= size;
  return values.view({-1}).narrow(0, 0, count).view(sizes);
}

}  // namespace

QuantisedWeight::QuantisedWeight(const torch::Tensor& weight, QuantisedFormat format)
    : format_(format), sizes_(weight.sizes().vec()) {
  TORCH_CHECK(weight.dim() == 2, "a quantised weight is a matrix");
  torch::NoGradGuard no_grad;
  const torch::Tensor values = weight.detach().to(torch::kFloat);
  if (format == QuantisedFormat::kInt8) {
    torch::Tensor absmax = values.abs().amax(1);
    absmax = torch::where(absmax > 0, absmax, torch::ones_like(absmax));
    scales_ = absmax / 127.0;
    codes_ = torch::round(values / scales_.unsqueeze(1)).clamp(-127, 127).to(torch::kChar);
  } else {
    TORCH_CHECK(format == QuantisedFormat::kNf4, "quantised weights are int8 or nf4");
    std::tie(codes_, scales_) = quantise_nf4(values);
  }
}

torch::Tensor QuantisedWeight::dequantise() const {
  if (format_ == QuantisedFormat::kInt8) return codes_.to(torch::kFloat).mul_(scales_.unsqueeze(1));
  return dequantise_nf4(codes_, scales_, sizes_);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct QuantisedState : torch::CustomClassHolder {
  QuantisedWeightPtr weight;
  torch::Tensor bias;  // frozen too, as autocast cast it (undefined when there is none)
  at::ScalarType compute_dtype = at::kFloat;  // the multiply's: autocast's, or the input's
  LinearInputShape input;
};

constexpr const char* kQuantisedKey = "rematlab.quantised_linear";

class QuantisedLinear : public torch::autograd::Function<QuantisedLinear> {
 public:
  // `input` as autocast hands it to a linear (cast outside, in the graph).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const c10::intrusive_ptr<QuantisedState>& state) {
    state->input = shape_of_linear_input(input);
    ctx->saved_data[kQuantisedKey] = c10::IValue::make_capsule(state);
    const torch::Tensor weight = state->weight->dequantise().to(state->compute_dtype);
    torch::Tensor bias = std::move(state->bias);  // not held past forward
    return torch::nn::functional::linear(input, weight, bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<QuantisedState>(
        ctx->saved_data.at(kQuantisedKey).toCapsule());
    ctx->saved_data.erase(kQuantisedKey);
    const torch::Tensor weight = state->weight->dequantise().to(state->compute_dtype);
    return {linear_input_backward(state->input, grad_outputs.at(0), weight), torch::Tensor()};
  }
};

}  // namespace

LinearOperands quantised_operands(const torch::Tensor& input, const torch::Tensor& bias) {
  // The dequantised values are the fp32 weight a model without quantisation would hold.
  const torch::Tensor stand_in = torch::empty({0}, input.options().dtype(torch::kFloat));
  return autocast_linear_operands(input, stand_in, bias);
}

torch::Tensor quantised_linear(const torch::Tensor& input, const QuantisedWeightPtr& weight,
                               const torch::Tensor& bias) {
  const LinearOperands operands = quantised_operands(input, bias);
  auto state = c10::make_intrusive<QuantisedState>();
  state->weight = weight;
  state->compute_dtype = operands.weight.scalar_type();
  state->bias = operands.bias;
  return QuantisedLinear::apply(operands.input, state);
}

}  // namespace rematlab
