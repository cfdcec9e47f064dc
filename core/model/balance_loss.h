// A mixture of experts' load-balancing loss (Switch Transformer's, as transformers computes it
// for Mixtral): for a block whose router gave probabilities p (tokens × E) and sent c_e of the
// tokens' k choices to expert e, E/N · Σ_e c_e · mean_t p_{t,e}, which is k when every expert
// gets its share. The model trains on its loss plus coefficient × the blocks' mean of it.
//
// The loss does not reach the model's loss as a tensor: a checkpointed segment's forward runs
// without a graph, so a term formed there would have no gradient. Its gradient enters instead
// where the block's output is formed (attach_balance_gradient), in the forward and again in a
// recomputation, as if it had been added to the loss.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>

namespace rematlab {

// What a model's mixture-of-experts blocks share: the gradient the balance loss enters with and
// the values and loads its forwards recorded.
class BalanceLedger {
 public:
  BalanceLedger(double coefficient, int64_t blocks);

  // d(what backward starts from) / d(the loss): what the trainer scales each micro-batch's loss
  // by (1 / accumulation steps, times an fp16 loss scale). 1 until told.
  void set_gradient_scale(double scale) { gradient_scale_ = scale; }
  // Each block's loss enters backward with this gradient: coefficient / blocks × scale.
  double block_gradient() const;
  bool trains() const { return coefficient_ > 0.0; }

  // A block's value from a forward (not a recomputation: that would count it twice).
  void record(const torch::Tensor& value);
  // The mean of the values recorded since the last take, and forgets them; none when no block
  // recorded one.
  std::optional<double> take();

  // A block's load from a forward: the most rows one of its experts took, over the share each
  // would take were the tokens' choices spread evenly (1: balanced). take_load() returns the
  // largest since the last take, and forgets it.
  void record_load(double ratio);
  std::optional<double> take_load();
  // Expert parallelism: a block's rows from a forward, those this rank's experts took and those
  // its own tokens sent. take_rank_load() returns the first sum over the second since the last
  // take (1: balanced; the step's expert activations here over a balanced rank's), and forgets.
  // take_block_rank_load() returns the largest one block's forward reached alone (a recomputed
  // block holds its own rows, not the step's mean), and forgets it.
  void record_rank_rows(int64_t taken_here, int64_t sent);
  std::optional<double> take_rank_load();
  std::optional<double> take_block_rank_load();
  // Forgets every value, load and row recorded since the last takes.
  void forget();

 private:
  double coefficient_;
  int64_t blocks_;
  double gradient_scale_ = 1.0;
  torch::Tensor sum_;  // on the values' device: reading it waits for the device, once a take
  int64_t count_ = 0;
  std::optional<double> load_;
  int64_t rows_taken_here_ = 0;
  int64_t rows_sent_ = 0;
  std::optional<double> block_rank_load_;
};

// E/N · Σ_e chosen_e · mean_t probabilities_{t,e} (a scalar, float32).
torch::Tensor balance_loss(const torch::Tensor& probabilities, const torch::Tensor& chosen);

// `output` itself, whose backward also hands `loss` the ledger's block gradient (when the
// ledger trains the loss and grad mode is on).
torch::Tensor attach_balance_gradient(const torch::Tensor& output, const torch::Tensor& loss,
                                      const std::shared_ptr<BalanceLedger>& ledger);

}  // namespace rematlab
