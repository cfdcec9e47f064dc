#include "model/moe.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

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

std::vector<torch::Tensor> MoeSublayer::keep_experts(const ExpertParallel& group) {
  if (group_) throw std::logic_error("keep_experts called twice");
  group_ = group;
  const int64_t first = group->first_expert(moe_.experts, group->rank());
  const int64_t held = group->experts_per_rank(moe_.experts);
  std::vector<torch::nn::Linear> up;
  std::vector<torch::nn::Linear> down;
  std::vector<torch::Tensor> kept;
  for (int64_t e = 0; e < moe_.experts; ++e) {
    const auto index = static_cast<std::size_t>(e);
    if (e >= first && e < first + held) {
      up.push_back(experts_up_[index]);
      down.push_back(experts_down_[index]);
      kept.push_back(up.back()->weight);
      kept.push_back(down.back()->weight);
    } else {
      const std::string name = "expert" + std::to_string(e);
      unregister_module(name + "_up");
      unregister_module(name + "_down");
    }
  }
  experts_up_ = std::move(up);
  experts_down_ = std::move(down);
  return kept;
}

void MoeSublayer::split_for_tensor_parallel(const TensorParallel& group,
                                            TensorParallelLayout& layout, bool sequence_parallel) {
  if (tensor_) throw std::logic_error("split_for_tensor_parallel called twice");
  auto split = [&](const torch::nn::Linear& up, const torch::nn::Linear& down) {
    const int64_t hidden = down->weight.size(1);
    const RowRange mine = part_of(hidden, group->size(), group->rank());
    keep_rows(up->weight, {mine, {hidden + mine.first, mine.count}});  // of gate, then of up
    keep_columns(down->weight, mine);
    layout.split.push_back(up->weight);
    layout.split.push_back(down->weight);
  };
  for (std::size_t e = 0; e < experts_up_.size(); ++e) split(experts_up_[e], experts_down_[e]);
  if (shared_up_) split(shared_up_, shared_down_);
  tensor_ = group;
  sequence_parallel_ = sequence_parallel;
}

torch::Tensor MoeSublayer::gathered(const torch::Tensor& local, int64_t batch, bool whole) const {
  const torch::Tensor slices = local.view({batch, -1, local.size(-1)});
  const torch::Tensor sequences = whole
                                      ? gather_whole(slices, tensor_, GatheredOrder::kSequence)
                                      : gather_sequence(slices, tensor_, GatheredOrder::kSequence);
  return sequences.reshape({-1, local.size(-1)});
}

MoeSublayer::ExpertOutputs MoeSublayer::run_experts(const torch::Tensor& rows,
                                                    const std::vector<int64_t>& taken) {
  if (group_) return run_experts_over_ranks(rows, taken);
  // Every expert runs, on no rows when none came to it, so every one has a gradient each step
  // (data parallelism's buckets wait for all of them).
  const std::vector<torch::Tensor> pieces = rows.split_with_sizes(taken);
  std::vector<torch::Tensor> outputs;
  outputs.reserve(pieces.size());
  for (std::size_t e = 0; e < pieces.size(); ++e) {
    outputs.push_back(run_expert(pieces[e], experts_up_[e], experts_down_[e]));
  }
  return {torch::cat(outputs), *std::max_element(taken.begin(), taken.end()), rows.size(0)};
}

MoeSublayer::ExpertOutputs MoeSublayer::run_experts_over_ranks(const torch::Tensor& rows,
                                                               const std::vector<int64_t>& taken) {
  const int ranks = group_->size();
  const auto held = static_cast<std::size_t>(group_->experts_per_rank(moe_.experts));
  // The experts are split in blocks by rank, so `taken` lists, rank after rank, what each
  // rank's experts take from here; `counts` is what each rank sends each expert held here.
  const std::vector<int64_t> counts = group_->exchange_counts(
      taken, static_cast<int64_t>(held), rows.device(), "counting the tokens each expert gets");
  std::vector<int64_t> sent(static_cast<std::size_t>(ranks), 0);
  std::vector<int64_t> received(static_cast<std::size_t>(ranks), 0);
  for (std::size_t slot = 0; slot < taken.size(); ++slot) {
    sent[slot / held] += taken[slot];
    received[slot / held] += counts[slot];
  }
  // Source after source, each source's rows expert after expert: each expert takes its pieces
  // in source order, which is the order of the global batch's rows, as one process takes them.
  const std::vector<torch::Tensor> pieces =
      dispatch_rows(rows, group_, sent, received).split_with_sizes(counts);
  std::vector<torch::Tensor> outputs(pieces.size());
  int64_t busiest = 0;
  for (std::size_t expert = 0; expert < held; ++expert) {
    std::vector<torch::Tensor> inputs;
    std::vector<int64_t> sizes;
    for (std::size_t source = 0; source < static_cast<std::size_t>(ranks); ++source) {
      inputs.push_back(pieces[source * held + expert]);
      sizes.push_back(counts[source * held + expert]);
    }
    const torch::Tensor output =
        run_expert(torch::cat(inputs), experts_up_[expert], experts_down_[expert]);
    const std::vector<torch::Tensor> parts = output.split_with_sizes(sizes);
    for (std::size_t source = 0; source < parts.size(); ++source) {
      outputs[source * held + expert] = parts[source];
    }
    busiest = std::max(busiest, output.size(0));
  }
  const int64_t rows_here = std::accumulate(received.begin(), received.end(), int64_t{0});
  return {dispatch_rows(torch::cat(outputs), group_, received, sent), busiest, rows_here};
}

torch::Tensor MoeSublayer::routed_experts(const torch::Tensor& tokens,
                                          const torch::Tensor& logits) {
  ExpertRouting routing = route_tokens(logits, moe_);
  // Split experts: each weight multiplies this rank's part of its expert's output.
  if (tensor_) routing.weights = into_region(routing.weights, tensor_);
  const int64_t k = moe_.experts_per_token;
  // The experts' outputs in one tensor (which the weighting keeps), their pieces gone.
  const ExpertOutputs outputs =
      run_experts(gather_expert_inputs(tokens, routing, k), routing.taken);
  torch::Tensor combined = combine_expert_outputs(outputs.rows, routing, tokens.size(0), k);
  if (is_training()) {
    const torch::Tensor balance = balance_loss(routing.probabilities, routing.chosen);
    if (!recomputing()) {
      ledger_->record(balance);
      // Each expert's share when balanced: the token choices of the ranks it serves, evenly.
      const int64_t ranks = group_ ? group_->size() : 1;
      ledger_->record_load(static_cast<double>(outputs.busiest) * moe_.experts /
                           static_cast<double>(tokens.size(0) * k * ranks));
      // A rank's share: the rows its own tokens sent (each rank's experts take as many when
      // balanced, every rank routing as many tokens).
      if (group_) ledger_->record_rank_rows(outputs.rows_here, routing.slots.size(0));
    }
    combined = attach_balance_gradient(combined, balance, ledger_);
  }
  return combined;
}

torch::Tensor MoeSublayer::shared_expert(const torch::Tensor& tokens, const torch::Tensor& local,
                                         int64_t batch) {
  torch::Tensor gate =
      torch::sigmoid(projection(KeptOutput::kRouter, local, shared_gate_->weight, torch::Tensor()));
  // Split: the gate multiplies this rank's part of the shared expert's output.
  if (tensor_) gate = sequence_parallel_ ? gathered(gate, batch) : into_region(gate, tensor_);
  return gate * run_expert(tokens, shared_up_, shared_down_);
}

SublayerTail MoeSublayer::forward_until_tail(const torch::Tensor& x) {
  const int64_t d = x.size(-1);
  const torch::Tensor local = norm_(x).reshape({-1, d});  // this rank's tokens
  torch::Tensor logits = projection(KeptOutput::kRouter, local, router_->weight, torch::Tensor());
  torch::Tensor tokens = local;  // every token of the micro-batch
  if (tensor_) {
    // Every rank routes every token alike (a gradient whole on each); each runs its part of every
    // expert, whose inputs' gradients are then parts to sum.
    if (sequence_parallel_) logits = gathered(logits, x.size(0), /*whole=*/true);
    tokens = sequence_parallel_ ? gathered(local, x.size(0)) : into_region(local, tensor_);
  }
  torch::Tensor branch = routed_experts(tokens, logits);
  if (shared_up_) branch = branch + shared_expert(tokens, local, x.size(0));
  SublayerTail tail;
  tail.residual = x;
  // Gathered, the tokens are the whole sequences, which the scatter slices again.
  tail.projection_input =
      sequence_parallel_ ? branch.view({x.size(0), -1, d}) : branch.view(x.sizes());
  tail.dropout = dropout_;
  tail.training = is_training();
  tail.sum_over = tensor_;
  tail.scatter_sequence = sequence_parallel_;
  tail.gathered_order = GatheredOrder::kSequence;
  return tail;
}

}  // namespace rematlab
