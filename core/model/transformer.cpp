#include "model/transformer.h"

#include <algorithm>
#include <unordered_set>

#include "checkpoint/segment_checkpoint.h"
#include "model/chunked_loss.h"
#include "model/initialisation.h"
#include "model/quantised_projection.h"

namespace rematlab {

TransformerImpl::TransformerImpl(const ModelConfig& config) : config_(config) {
  // Both embeddings are built before either is initialised: the order the random generator is
  // drawn in decides the weights, and seeds must keep giving the same models.
  token_embedding_ =
      register_module("token_embedding", torch::nn::Embedding(config.vocab, config.d_model));
  if (config.family == ModelFamily::kGpt) {
    position_embedding_ =
        register_module("position_embedding", torch::nn::Embedding(config.seq_len, config.d_model));
  }
  {
    torch::NoGradGuard no_grad;
    token_embedding_->weight.normal_(0.0, kProjectionStd);
    if (position_embedding_) position_embedding_->weight.normal_(0.0, kProjectionStd);
  }
  if (config.family == ModelFamily::kLlama) {
    rotary_ = std::make_shared<RotaryTables>(
        make_rotary_tables(config.seq_len, config.head_dim(), config.rope_theta));
    // Buffers move with the model (to() swaps their data in place, so the tables every
    // attention sublayer holds follow).
    register_buffer("rotary_cos", rotary_->cos);
    register_buffer("rotary_sin", rotary_->sin);
  }
  // A sliding window's masks are made once and shared: each layer's kernel keeps its mask.
  std::shared_ptr<const WindowMasks> window;
  if (config.sliding_window > 0) window = std::make_shared<WindowMasks>(config.sliding_window);
  if (config.moe.enabled()) {
    balance_ = std::make_shared<BalanceLedger>(config.moe.balance_coefficient, config.layers);
  }
  for (int64_t block = 0; block < config.layers; ++block) {
    auto attention = std::make_shared<AttentionSublayer>(config, rotary_, window);
    std::shared_ptr<Sublayer> mlp;
    if (balance_) {
      mlp = std::make_shared<MoeSublayer>(config, balance_);
    } else {
      mlp = std::make_shared<MlpSublayer>(config);
    }
    register_module("block" + std::to_string(block) + "_attn", attention);
    register_module("block" + std::to_string(block) + (balance_ ? "_moe" : "_mlp"), mlp);
    attention_sublayers_.push_back(attention);
    sublayers_.push_back(attention);
    sublayers_.push_back(mlp);
  }
  chunks_ = {{0, static_cast<int64_t>(sublayers_.size())}};
  final_norm_ = register_module("final_norm", Norm(config.family, config.d_model));
  if (!config.tie_head) {
    head_ = register_module(
        "head",
        torch::nn::Linear(torch::nn::LinearOptions(config.d_model, config.vocab).bias(false)));
    initialise_linear(head_, kProjectionStd);
  }
  if (config.lora.enabled()) {
    // The base trains no more; the adapters, drawn after it (so the base is the model the same
    // seed gives without them), are all that trains.
    for (torch::Tensor& param : parameters()) param.requires_grad_(false);
    for (const auto& sublayer : sublayers_) {
      if (auto attention = std::dynamic_pointer_cast<AttentionSublayer>(sublayer)) {
        attention->attach_lora(config.lora);
      } else if (auto mlp = std::dynamic_pointer_cast<MlpSublayer>(sublayer)) {
        mlp->attach_lora(config.lora);
      }
    }
    if (config.lora.base == BasePrecision::kBf16) store_projections_in(torch::kBFloat16);
    if (is_quantised(config.lora.base)) quantise_projections(quantised_format(config.lora.base));
  }
}

void TransformerImpl::store_projections_in(torch::Dtype dtype) {
  // Every linear layer of the base (each sublayer's projections, an untied head): the bulk of its
  // weights. The embedding and the norms stay as they are.
  auto store = [dtype](torch::nn::Module& module) {
    if (dynamic_cast<torch::nn::LinearImpl*>(&module) == nullptr) return;
    for (torch::Tensor& param : module.parameters(/*recurse=*/false)) {
      param.set_data(param.detach().to(dtype));
    }
  };
  for (const auto& sublayer : sublayers_) {
    for (const auto& child : sublayer->children()) store(*child);
  }
  if (head_) store(*head_);
}

void TransformerImpl::quantise_projections(QuantisedFormat format) {
  // The blocks' projections, the bulk of the weights; an untied head stays as it is (QLoRA keeps
  // it unquantised too), as do the embedding and the norms.
  for (const auto& sublayer : sublayers_) {
    if (auto attention = std::dynamic_pointer_cast<AttentionSublayer>(sublayer)) {
      attention->quantise_projections(format);
    } else if (auto mlp = std::dynamic_pointer_cast<MlpSublayer>(sublayer)) {
      mlp->quantise_projections(format);
    }
  }
}

std::vector<torch::Tensor> TransformerImpl::split_for_expert_parallel(const ExpertParallel& group) {
  std::vector<torch::Tensor> experts;
  for (const auto& sublayer : sublayers_) {
    if (auto moe = std::dynamic_pointer_cast<MoeSublayer>(sublayer)) {
      const std::vector<torch::Tensor> kept = moe->keep_experts(group);
      experts.insert(experts.end(), kept.begin(), kept.end());
    }
  }
  return experts;
}

TensorParallelLayout TransformerImpl::split_for_tensor_parallel(const TensorParallel& group,
                                                                bool sequence_parallel) {
  if (group_) throw std::logic_error("split_for_tensor_parallel called twice");
  TensorParallelLayout layout;
  for (const auto& sublayer : sublayers_) {
    if (auto attention = std::dynamic_pointer_cast<AttentionSublayer>(sublayer)) {
      attention->split_for_tensor_parallel(group, layout, sequence_parallel);
    } else if (auto mlp = std::dynamic_pointer_cast<MlpSublayer>(sublayer)) {
      mlp->split_for_tensor_parallel(group, layout, sequence_parallel);
    } else if (auto moe = std::dynamic_pointer_cast<MoeSublayer>(sublayer)) {
      moe->split_for_tensor_parallel(group, layout, sequence_parallel);
    }
  }
  const RowRange rows = part_of(config_.vocab, group->size(), group->rank());
  vocab_shard_ = {rows.first, rows.count};
  keep_rows(token_embedding_->weight, {rows});
  layout.split.push_back(token_embedding_->weight);
  if (head_) {
    keep_rows(head_->weight, {rows});
    layout.split.push_back(head_->weight);
  }
  if (sequence_parallel) {
    // Norms, biases after a sum and positions see this rank's tokens only.
    std::unordered_set<const void*> split;
    for (const torch::Tensor& param : layout.split) split.insert(param.unsafeGetTensorImpl());
    for (const torch::Tensor& param : parameters()) {
      if (!split.count(param.unsafeGetTensorImpl()))
        layout.partial.push_back({param, {0, param.size(0)}});
    }
  }
  group_ = group;
  sequence_parallel_ = sequence_parallel;
  return layout;
}

const torch::Tensor& TransformerImpl::head_weight() const {
  return config_.tie_head ? token_embedding_->weight : head_->weight;
}

namespace {

// Sublayer i is unit 1 + i (model/parameter_units.h).
std::size_t unit_of(std::size_t sublayer) { return 1 + sublayer; }

torch::Tensor run_sublayer(const std::shared_ptr<ParameterUnits>& units, std::size_t index,
                           Sublayer& sublayer, const torch::Tensor& x) {
  if (!units) return sublayer.forward(x);
  units->gather(unit_of(index));
  return units->release(unit_of(index), sublayer.forward(x));
}

}  // namespace

torch::Tensor TransformerImpl::run_segment(const Segment& segment, const torch::Tensor& input,
                                           const KeptOutputs& keep) {
  // The closure holds the sublayers it runs, so a pending recomputation never dangles.
  std::vector<std::shared_ptr<Sublayer>> span(sublayers_.begin() + segment.begin,
                                              sublayers_.begin() + segment.end);
  const std::size_t first = static_cast<std::size_t>(segment.begin);
  auto run = [span, first, units = units_](const torch::Tensor& x) {
    torch::Tensor h = x;
    for (std::size_t i = 0; i < span.size(); ++i) h = run_sublayer(units, first + i, *span[i], h);
    return h;
  };
  if (!segment.recompute) return run(input);
  std::vector<torch::Tensor> params;
  for (const auto& sublayer : span) {
    for (const auto& param : sublayer->parameters()) params.push_back(param);
  }
  // The recomputation stops at the last sublayer's tail: its projection is not run again.
  auto until_tail = [span, first, units = units_](const torch::Tensor& x) {
    torch::Tensor h = x;
    for (std::size_t i = 0; i + 1 < span.size(); ++i) {
      h = run_sublayer(units, first + i, *span[i], h);
    }
    const std::size_t last = unit_of(first + span.size() - 1);
    if (units) units->gather(last);
    SublayerTail tail = span.back()->forward_until_tail(h);
    // Without grad (the checkpoint's forward) the unit is freed once the tail's projection ran;
    // in a recomputation its backward comes next, and it stays whole for it.
    if (units && !torch::GradMode::is_enabled()) tail.held = units->hold(last);
    return tail;
  };
  return checkpoint_segment(run, input, params, until_tail, keep);
}

std::vector<std::vector<torch::Tensor>> TransformerImpl::parameter_units() const {
  std::vector<std::vector<torch::Tensor>> units(1 + sublayers_.size());
  std::unordered_set<const void*> in_sublayers;
  for (std::size_t index = 0; index < sublayers_.size(); ++index) {
    for (const torch::Tensor& param : sublayers_[index]->parameters()) {
      units[unit_of(index)].push_back(param);
      in_sublayers.insert(param.unsafeGetTensorImpl());
    }
  }
  for (const torch::Tensor& param : parameters()) {
    if (!in_sublayers.count(param.unsafeGetTensorImpl())) units[0].push_back(param);
  }
  return units;
}

void TransformerImpl::use_parameter_units(std::shared_ptr<ParameterUnits> units) {
  units_ = std::move(units);
}

torch::Tensor TransformerImpl::embed(const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2, "tokens must be (batch, seq)");
  TORCH_CHECK(tokens.size(1) <= config_.seq_len, "sequence longer than the model's seq_len");
  torch::Tensor h = group_ ? vocab_parallel_embedding(tokens, token_embedding_->weight,
                                                      vocab_shard_, group_, sequence_parallel_)
                           : token_embedding_(tokens);
  if (position_embedding_) {
    // Under sequence parallelism h holds this rank's slice of the positions.
    const int64_t count = h.size(1);
    const int64_t first = sequence_parallel_ ? group_->rank() * count : 0;
    const torch::Tensor positions = torch::arange(
        first, first + count, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
    h = h + position_embedding_(positions);
  }
  return h;
}

torch::Tensor TransformerImpl::chain_output(const torch::Tensor& tokens,
                                            const CheckpointPlan& plan) {
  // Unit 0 (embeddings, final norm, head) stays whole from here until its gradients are reduced:
  // the head's forward ends the step's forward and its backward begins backward.
  if (units_) units_->gather(0);
  return chunk_output(tokens, plan);
}

void TransformerImpl::keep_chunks(const std::vector<std::pair<int64_t, int64_t>>& chunks) {
  const auto count = static_cast<int64_t>(sublayers_.size());
  int64_t previous_end = 0;
  for (const auto& [begin, end] : chunks) {
    if (begin < previous_end || begin >= end || end > count) {
      throw std::logic_error("pipeline chunks outside the chain or out of order");
    }
    previous_end = end;
  }
  if (chunks.empty()) throw std::logic_error("a pipeline stage without a chunk");
  chunks_ = chunks;
  std::unordered_set<const void*> kept;
  for (const auto& params : chunk_parameters()) {
    for (const torch::Tensor& param : params) kept.insert(param.unsafeGetTensorImpl());
  }
  torch::NoGradGuard no_grad;
  for (torch::Tensor& param : parameters()) {
    if (kept.count(param.unsafeGetTensorImpl())) continue;
    param.requires_grad_(false);
    param.set_data(torch::empty({0}, param.options()));
  }
  // A quantised base keeps its projections as buffers (codes and scales): the other stages'
  // blocks' go too.
  for (std::size_t index = 0; index < sublayers_.size(); ++index) {
    const auto at = static_cast<int64_t>(index);
    const bool held = std::any_of(chunks.begin(), chunks.end(), [at](const auto& chunk) {
      return chunk.first <= at && at < chunk.second;
    });
    if (held) continue;
    for (auto& item : sublayers_[index]->named_buffers()) {
      if (!is_quantised_weight(item.key())) continue;
      item.value().set_data(torch::empty({0}, item.value().options()));
    }
  }
}

int64_t TransformerImpl::frozen_bytes() const {
  int64_t bytes = 0;
  for (const torch::Tensor& param : parameters()) {
    if (!param.requires_grad()) bytes += static_cast<int64_t>(param.nbytes());
  }
  for (const auto& item : named_buffers()) {
    if (is_quantised_weight(item.key())) bytes += static_cast<int64_t>(item.value().nbytes());
  }
  return bytes;
}

std::vector<std::vector<torch::Tensor>> TransformerImpl::chunk_parameters() const {
  std::vector<std::vector<torch::Tensor>> by_chunk;
  for (const auto& [begin, end] : chunks_) {
    std::vector<torch::Tensor> params;
    auto add = [&params](const torch::nn::Module& module) {
      for (const torch::Tensor& param : module.parameters()) params.push_back(param);
    };
    if (begin == 0) {
      add(*token_embedding_);
      if (position_embedding_) add(*position_embedding_);
    }
    for (int64_t index = begin; index < end; ++index)
      add(*sublayers_[static_cast<std::size_t>(index)]);
    if (end == static_cast<int64_t>(sublayers_.size())) {
      add(*final_norm_);
      if (head_) add(*head_);
      if (config_.tie_head && begin != 0) add(*token_embedding_);  // the head's weight
    }
    by_chunk.push_back(std::move(params));
  }
  return by_chunk;
}

torch::Tensor TransformerImpl::chunk_output(const torch::Tensor& input, const CheckpointPlan& plan,
                                            std::size_t chunk) {
  const auto [begin, end] = chunks_.at(chunk);
  for (const auto& attention : attention_sublayers_) {
    attention->set_recompute_core(plan.recompute_attention_core);
  }
  torch::Tensor h = begin == 0 ? embed(input) : input;
  for (const Segment& segment : plan.segments) {
    // The plan's segments cut at the chunk's edges: a segment across one is recomputed on each
    // side from that side's own input.
    const Segment here{std::max(segment.begin, begin), std::min(segment.end, end),
                       segment.recompute};
    if (here.begin < here.end) h = run_segment(here, h, plan.keep);
  }
  return h;
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens, const CheckpointPlan& plan) {
  if (group_) throw std::logic_error("no rank forms the logits under tensor parallelism");
  return torch::nn::functional::linear(final_norm_(chain_output(tokens, plan)), head_weight());
}

torch::Tensor TransformerImpl::head_loss(const torch::Tensor& chain_end,
                                         const torch::Tensor& targets) {
  torch::Tensor hidden = final_norm_(chain_end);
  if (group_) {
    // Every rank's head needs every token's hidden state; the edge's backward sums the ranks'
    // parts of its gradient.
    hidden = sequence_parallel_ ? gather_sequence(hidden, group_) : into_region(hidden, group_);
    return vocab_parallel_cross_entropy(hidden.reshape({-1, config_.d_model}), head_weight(),
                                        targets.reshape({-1}), vocab_shard_,
                                        config_.loss_chunk_count(), group_);
  }
  return chunked_cross_entropy(hidden.reshape({-1, config_.d_model}), head_weight(),
                               targets.reshape({-1}), config_.loss_chunk_count());
}

torch::Tensor TransformerImpl::loss(const torch::Tensor& tokens, const torch::Tensor& targets,
                                    const CheckpointPlan& plan) {
  return head_loss(chain_output(tokens, plan), targets);
}

}  // namespace rematlab
