// A mixture of experts in place of a block's MLP (Llama family): x + dropout(Σ_j w_j ·
// expert_j(norm(x)) + shared(norm(x))), the sum over the k experts the router picks for each
// token, each expert a SwiGLU MLP of its own. No token is dropped unless a capacity factor says
// so. The block's balance loss is recorded in the model's ledger and its gradient enters here
// (balance_loss.h). Its tail has no one projection (the experts' down projections end it), so a
// recomputation that ends here runs it whole.
//
// Over tensor ranks each expert is split by width as the MLP is (its [gate; up] rows and down
// columns), the shared expert too: every rank routes every token alike and runs its part of
// every expert, and the tail sums the parts. The gradients each rank forms only part of — the
// experts' inputs, the routing weights and the shared gate, which multiply partial outputs — are
// summed over the ranks where they enter; the router's is whole on every rank.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "collective/expert_parallel_group.h"
#include "model/balance_loss.h"
#include "model/model_config.h"
#include "model/norm.h"
#include "model/sublayer.h"
#include "model/tensor_parallel_layout.h"

namespace rematlab {

class MoeSublayer : public Sublayer {
 public:
  MoeSublayer(const ModelConfig& config, std::shared_ptr<BalanceLedger> ledger);
  SublayerTail forward_until_tail(const torch::Tensor& x) override;

  // Expert parallelism: keeps the experts `group`'s rank holds (built whole alike on every
  // rank) and from then on sends each token's rows to the rank of its expert. Returns the kept
  // experts' parameters, which each rank holds unlike the others. Call once, before anything
  // holds the parameters.
  std::vector<torch::Tensor> keep_experts(const ExpertParallel& group);
  // Tensor parallelism: keeps this rank's part of each expert's (and the shared expert's) width.
  void split_for_tensor_parallel(const TensorParallel& group, TensorParallelLayout& layout,
                                 bool sequence_parallel);

 private:
  // One expert's SwiGLU MLP on its rows of tokens.
  static torch::Tensor run_expert(const torch::Tensor& rows, const torch::nn::Linear& up,
                                  const torch::nn::Linear& down);
  // The routed experts' weighted sum for `tokens` (every token of the micro-batch), routed by
  // `logits`; under tensor parallelism this rank's part of it.
  torch::Tensor routed_experts(const torch::Tensor& tokens, const torch::Tensor& logits);
  struct ExpertOutputs {
    torch::Tensor rows;     // in the order of the rows the experts were given
    int64_t busiest = 0;    // the most rows one expert took
    int64_t rows_here = 0;  // the rows the experts here took (from every rank under --ep)
  };
  // The experts' outputs for `rows` (grouped by expert, taken[e] of expert e's): here, or over
  // the expert ranks.
  ExpertOutputs run_experts(const torch::Tensor& rows, const std::vector<int64_t>& taken);
  ExpertOutputs run_experts_over_ranks(const torch::Tensor& rows,
                                       const std::vector<int64_t>& taken);
  torch::Tensor shared_expert(const torch::Tensor& tokens, const torch::Tensor& local,
                              int64_t batch);
  // Under sequence parallelism: `local` (this rank's tokens' rows, `batch` sequences of them)
  // gathered into the micro-batch's rows in sequence order, as one process has them (a capacity
  // keeps the first rows), with the gradient's parts summed (`whole`: a gradient every rank forms
  // whole, so not summed).
  torch::Tensor gathered(const torch::Tensor& local, int64_t batch, bool whole = false) const;

  MoeOptions moe_;
  double dropout_;
  Norm norm_{nullptr};
  torch::nn::Linear router_{nullptr};
  std::vector<torch::nn::Linear> experts_up_;  // [gate; up] of each expert held here
  std::vector<torch::nn::Linear> experts_down_;
  torch::nn::Linear shared_up_{nullptr};  // Qwen 2 MoE's shared expert and its gate, when set
  torch::nn::Linear shared_down_{nullptr};
  torch::nn::Linear shared_gate_{nullptr};
  std::shared_ptr<BalanceLedger> ledger_;
  ExpertParallel group_;            // null: every expert here
  TensorParallel tensor_;           // null: each expert whole
  bool sequence_parallel_ = false;  // x is this rank's slice of the sequence
};

}  // namespace rematlab
