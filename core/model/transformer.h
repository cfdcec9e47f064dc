// The decoder-only transformer of every family, as one chain: an embedding, 2·layers residual
// sublayers (attn0, mlp0, attn1, mlp1, …), and the head with its loss. Checkpoint plans cut the
// chain between sublayers; the family only decides what is inside each piece (model_config.h).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_policy.h"
#include "model/attention.h"
#include "model/balance_loss.h"
#include "model/mlp.h"
#include "model/model_config.h"
#include "model/moe.h"
#include "model/norm.h"
#include "model/parameter_units.h"
#include "model/rotary.h"
#include "model/sublayer.h"
#include "model/tensor_parallel_layout.h"
#include "model/vocab_parallel.h"

namespace rematlab {

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const ModelConfig& config);

  // Logits (batch, seq, vocab) for token ids (batch, seq), run under `plan` (not under tensor
  // parallelism, where no rank forms them).
  torch::Tensor forward(const torch::Tensor& tokens, const CheckpointPlan& plan);
  // Mean cross-entropy of predicting `targets`; the head and loss run in
  // config().loss_chunk_count() slices of the tokens.
  torch::Tensor loss(const torch::Tensor& tokens, const torch::Tensor& targets,
                     const CheckpointPlan& plan);

  // The pieces `loss` is made of, for measuring them one by one (core/plan/chain_profile):
  // the chain's input for `tokens` (the embeddings), and the loss from the chain's output.
  torch::Tensor embed(const torch::Tensor& tokens);
  torch::Tensor head_loss(const torch::Tensor& chain_end, const torch::Tensor& targets);

  // Tensor parallelism: keeps this rank's part of every split layer (attention heads, MLP width,
  // the vocabulary rows of the embedding and the head), from the whole model built alike on
  // every rank, so that the ranks together hold exactly one process's model. With
  // `sequence_parallel` the residual stream, norms and dropout between the layers hold this
  // rank's slice of the sequence, so every replicated parameter's gradient is partial. Call
  // once, before anything holds the parameters. Returns which parameters were split and which
  // gradients the ranks must sum. The config must have been checked (run_config's validate).
  TensorParallelLayout split_for_tensor_parallel(const TensorParallel& group,
                                                 bool sequence_parallel = false);
  const TensorParallel& tensor_parallel() const { return group_; }

  // Expert parallelism: every mixture-of-experts block keeps the experts `group`'s rank holds
  // (MoeSublayer::keep_experts). Returns their parameters, which each rank of the group holds
  // unlike the others; everything else is replicated. Call once, before anything holds the
  // parameters.
  std::vector<torch::Tensor> split_for_expert_parallel(const ExpertParallel& group);

  // Pipeline parallelism: this process runs the chunks of the chain given as sublayer ranges
  // [begin, end), in chain order (one without virtual stages), with the embedding where a chunk
  // begins at 0 and the final norm, head and loss where one ends at the last; every other
  // parameter is released (left empty, wanting no gradient), and so are the quantised codes and
  // scales of the blocks it does not run (a frozen base's). A tied head keeps the token
  // embedding on both the first and the last stage. Call once, before anything holds the
  // parameters.
  void keep_chunks(const std::vector<std::pair<int64_t, int64_t>>& chunks);
  // Each kept chunk's parameters, in chain order: its blocks', and the embedding's or the final
  // norm's and head's where it begins or ends the chain (a tied head's weight in both).
  std::vector<std::vector<torch::Tensor>> chunk_parameters() const;
  bool has_embedding() const { return chunks_.front().first == 0; }
  bool has_head() const { return chunks_.back().second == static_cast<int64_t>(sublayers_.size()); }
  // Kept chunk `chunk`'s part of the chain under `plan` (its segments cut at the chunk's edges):
  // from token ids where the chunk begins the chain, else from the previous chunk's output.
  torch::Tensor chunk_output(const torch::Tensor& input, const CheckpointPlan& plan,
                             std::size_t chunk = 0);

  // Fully sharded parameters: the units the model asks to have whole (model/parameter_units.h),
  // each unit's parameters in registration order; unit 0 is every parameter outside the
  // sublayers. From use_parameter_units() on, forward and backward gather and release them.
  std::vector<std::vector<torch::Tensor>> parameter_units() const;
  void use_parameter_units(std::shared_ptr<ParameterUnits> units);

  const ModelConfig& config() const { return config_; }
  // A mixture of experts' balance losses and the gradient they enter with; null for a dense
  // model.
  BalanceLedger* balance() const { return balance_.get(); }
  // attn0, mlp0, attn1, mlp1, …
  const std::vector<std::shared_ptr<Sublayer>>& sublayers() const { return sublayers_; }
  // The output projection (vocab, d): the token embedding when the head is tied.
  const torch::Tensor& head_weight() const;
  // Bytes of the frozen base this process holds (fine-tuning; 0 in full training): weights that
  // train nothing, and a quantised base's codes and scales, measured (a pipeline stage holds its
  // own blocks' only).
  int64_t frozen_bytes() const;

 private:
  // The chain's output (batch, seq, d) under `plan`, before the final norm.
  torch::Tensor chain_output(const torch::Tensor& tokens, const CheckpointPlan& plan);
  torch::Tensor run_segment(const Segment& segment, const torch::Tensor& input,
                            const KeptOutputs& keep);
  // A frozen base's linear layers in `dtype` (--base-precision bf16), or the blocks' projections
  // quantised (int8, nf4).
  void store_projections_in(torch::Dtype dtype);
  void quantise_projections(QuantisedFormat format);

  ModelConfig config_;
  torch::nn::Embedding token_embedding_{nullptr};
  torch::nn::Embedding position_embedding_{nullptr};  // GPT's learned positions
  std::shared_ptr<RotaryTables> rotary_;              // Llama's rotary tables (also buffers)
  std::vector<std::shared_ptr<Sublayer>> sublayers_;
  std::vector<std::shared_ptr<AttentionSublayer>> attention_sublayers_;
  std::shared_ptr<BalanceLedger> balance_;  // experts only
  Norm final_norm_{nullptr};
  torch::nn::Linear head_{nullptr};  // untied heads only
  TensorParallel group_;             // null: the whole model on this process
  VocabShard vocab_shard_;           // the embedding's and head's rows here, under group_
  bool sequence_parallel_ = false;
  std::shared_ptr<ParameterUnits> units_;  // null: every parameter is whole all the time
  // The sublayer ranges this process runs (keep_chunks): the whole chain unless it is a
  // pipeline stage.
  std::vector<std::pair<int64_t, int64_t>> chunks_;
};
TORCH_MODULE(Transformer);

}  // namespace rematlab
