// Hooks on a parameter's gradient accumulator, as std::function: before it accumulates (may
// change or drop the gradient) and after. Data parallelism sends gradients from them; fully
// sharded parameters reduce a unit's gradients and free its parameters from them.
#pragma once

#include <torch/csrc/autograd/function_hook.h>

#include <functional>
#include <utility>

namespace rematlab::parallel {

class AccumulatorPreHook final : public torch::autograd::FunctionPreHook {
 public:
  using Call = std::function<torch::autograd::variable_list(const torch::autograd::variable_list&)>;
  explicit AccumulatorPreHook(Call call) : call_(std::move(call)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    return call_(grads);
  }

 private:
  Call call_;
};

class AccumulatorPostHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit AccumulatorPostHook(std::function<void()> call) : call_(std::move(call)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    call_();
    return outputs;
  }

 private:
  std::function<void()> call_;
};

}  // namespace rematlab::parallel
