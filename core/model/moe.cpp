#include "model/moe.h"

#include "checkpoint/kept_outputs.h"
#include "checkpoint/replay_state.h"
#include "model/expert_routing.h"
#include "model/initialisation.h"
#include "model/swiglu.h"

namespace rematlab {
namespace {

torch::nn::Linear projection_layer(int64_t in, int64_t out, double std) {
  torch::nn::Linear linear(torch::nn::LinearOptions(in, out).bias(false));
  initialise_linear(linear, std);
  return linear;
}

}  // namespace

MoeSublayer::MoeSublayer(const ModelConfig& config, std::shared_ptr<BalanceLedger> ledger)
    : moe_(config.moe), dropout_(config.dropout), ledger_(std::move(ledger)) {
  const int64_t d = config.d_model;
  const int64_t hidden = config.expert_width();
  const double down_std = residual_projection_std(config);
  norm_ = register_module("norm", Norm(config.family, d));
  router_ = register_module("router", projection_layer(d, moe_.experts, kProjectionStd));
  for (int64_t e = 0; e < moe_.experts; ++e) {
    const std::string name = "expert" + std::to_string(e);
    experts_up_.push_back(
        register_module(name + "_up", projection_layer(d, 2 * hidden, kProjectionStd)));
    experts_down_.push_back(register_module(name + "_down", projection_layer(hidden, d, down_std)));
  }
  if (moe_.shared_expert_hidden > 0) {
    const int64_t shared = moe_.shared_expert_hidden;
    shared_up_ = register_module("shared_up", projection_layer(d, 2 * shared, kProjectionStd));
    shared_down_ = register_module("shared_down", projection_layer(shared, d, down_std));
    shared_gate_ = register_module("shared_gate", projection_layer(d, 1, kProjectionStd));
  }
}

torch::Tensor MoeSublayer::run_expert(const torch::Tensor& rows, const torch::nn::Linear& up,
                                      const torch::nn::Linear& down) {
  const torch::Tensor hidden =
      swiglu(projection(KeptOutput::kMlpIn, rows, up->weight, torch::Tensor()));
  return projection(KeptOutput::kExpertOut, hidden, down->weight, torch::Tensor());
}

torch::Tensor MoeSublayer::routed_experts(const torch::Tensor& tokens) {
  const torch::Tensor logits =
      projection(KeptOutput::kRouter, tokens, router_->weight, torch::Tensor());
  const ExpertRouting routing = route_tokens(logits, moe_);
  const int64_t k = moe_.experts_per_token;
  // Every expert runs, on no rows when none came to it, so every one has a gradient each step
  // (data parallelism's buckets wait for all of them).
  const std::vector<torch::Tensor> rows =
      gather_expert_inputs(tokens, routing, k).split_with_sizes(routing.taken);
  std::vector<torch::Tensor> outputs;
  outputs.reserve(rows.size());
  for (std::size_t e = 0; e < rows.size(); ++e) {
    outputs.push_back(run_expert(rows[e], experts_up_[e], experts_down_[e]));
  }
  // The experts' outputs in one tensor (which the weighting keeps), their pieces gone.
  torch::Tensor joined = torch::cat(outputs);
  outputs.clear();
  torch::Tensor combined = combine_expert_outputs(joined, routing, tokens.size(0), k);
  joined.reset();
  if (is_training()) {
    const torch::Tensor balance = balance_loss(routing.probabilities, routing.chosen);
    if (!recomputing()) ledger_->record(balance);
    combined = attach_balance_gradient(combined, balance, ledger_);
  }
  return combined;
}

torch::Tensor MoeSublayer::shared_expert(const torch::Tensor& tokens) {
  const torch::Tensor gate = torch::sigmoid(
      projection(KeptOutput::kRouter, tokens, shared_gate_->weight, torch::Tensor()));
  return gate * run_expert(tokens, shared_up_, shared_down_);
}

SublayerTail MoeSublayer::forward_until_tail(const torch::Tensor& x) {
  const torch::Tensor tokens = norm_(x).reshape({-1, x.size(-1)});
  torch::Tensor branch = routed_experts(tokens);
  if (shared_up_) branch = branch + shared_expert(tokens);
  SublayerTail tail;
  tail.residual = x;
  tail.projection_input = branch.view(x.sizes());
  tail.dropout = dropout_;
  tail.training = is_training();
  return tail;
}

}  // namespace rematlab
