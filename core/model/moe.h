// A mixture of experts in place of a block's MLP (Llama family): x + dropout(Σ_j w_j ·
// expert_j(norm(x)) + shared(norm(x))), the sum over the k experts the router picks for each
// token, each expert a SwiGLU MLP of its own. No token is dropped unless a capacity factor says
// so. The block's balance loss is recorded in the model's ledger and its gradient enters here
// (balance_loss.h). Its tail has no one projection (the experts' down projections end it), so a
// recomputation that ends here runs it whole.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "model/balance_loss.h"
#include "model/model_config.h"
#include "model/norm.h"
#include "model/sublayer.h"

namespace rematlab {

class MoeSublayer : public Sublayer {
 public:
  MoeSublayer(const ModelConfig& config, std::shared_ptr<BalanceLedger> ledger);
  SublayerTail forward_until_tail(const torch::Tensor& x) override;

 private:
  // One expert's SwiGLU MLP on its rows of tokens.
  static torch::Tensor run_expert(const torch::Tensor& rows, const torch::nn::Linear& up,
                                  const torch::nn::Linear& down);
  torch::Tensor routed_experts(const torch::Tensor& tokens);
  torch::Tensor shared_expert(const torch::Tensor& tokens);

  MoeOptions moe_;
  double dropout_;
  Norm norm_{nullptr};
  torch::nn::Linear router_{nullptr};
  std::vector<torch::nn::Linear> experts_up_;  // [gate; up] of each expert
  std::vector<torch::nn::Linear> experts_down_;
  torch::nn::Linear shared_up_{nullptr};  // Qwen 2 MoE's shared expert and its gate, when set
  torch::nn::Linear shared_down_{nullptr};
  torch::nn::Linear shared_gate_{nullptr};
  std::shared_ptr<BalanceLedger> ledger_;
};

}  // namespace rematlab
