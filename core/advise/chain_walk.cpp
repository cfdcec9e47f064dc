#include "advise/chain_walk.h"

#include <algorithm>
#include <cmath>

#include "checkpoint/replay_state.h"
#include "model/chunked_loss.h"
#include "model/norm.h"

namespace rematlab::advise {
namespace {

int64_t nonfinite_count(const torch::Tensor& t) {
  return (~torch::isfinite(t.detach())).sum().item<int64_t>();
}

double max_abs_finite(const torch::Tensor& t) {
  const torch::Tensor values = t.detach().to(torch::kFloat).abs();
  const torch::Tensor finite = values.masked_select(torch::isfinite(values));
  return finite.numel() == 0 ? 0.0 : finite.max().item<double>();
}

// The piece a parameter belongs to, from the names TransformerImpl registers its modules by.
std::size_t piece_of(const std::string& name, std::size_t pieces) {
  if (name.rfind("token_embedding", 0) == 0 || name.rfind("position_embedding", 0) == 0) return 0;
  if (name.rfind("block", 0) == 0) {
    const std::size_t underscore = name.find('_');
    const std::size_t block = std::stoul(name.substr(5, underscore - 5));
    // The MLP's modules, dense (block0_mlp) or a mixture of experts (block0_moe).
    const bool mlp = name.compare(underscore + 1, 4, "attn") != 0;
    return 1 + 2 * block + (mlp ? 1 : 0);
  }
  return pieces - 1;  // final_norm, head
}

template <typename Impl>
Impl* child(TransformerImpl& model, const std::string& name) {
  const auto children = model.named_children();  // find() points into this copy
  const auto* found = children.find(name);
  return found ? (*found)->as<Impl>() : nullptr;
}

}  // namespace

std::optional<std::size_t> ChainWalk::first_nonfinite_output() const {
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].nonfinite_outputs > 0) return i;
  }
  return std::nullopt;
}

std::optional<std::size_t> ChainWalk::first_nonfinite_backward() const {
  for (std::size_t i = pieces.size(); i-- > 0;) {
    if (!pieces[i].output_grad_finite) continue;
    const bool input_bad = i > 0 && !pieces[i - 1].output_grad_finite;
    if (input_bad || !pieces[i].nonfinite_param_grad.empty()) return i;
  }
  return std::nullopt;
}

namespace {

// One micro-batch forward, piece by piece as the `none` computation runs it, under the run's
// autocast: the embedding's output, each sublayer's, and last the loss (a mean over the tokens).
std::vector<torch::Tensor> forward_by_piece(Trainer& trainer, const torch::Tensor& tokens,
                                            const torch::Tensor& targets) {
  TransformerImpl& model = *trainer.model();
  const ModelConfig& config = model.config();
  auto* token_embedding = child<torch::nn::EmbeddingImpl>(model, "token_embedding");
  auto* position_embedding = child<torch::nn::EmbeddingImpl>(model, "position_embedding");
  auto* final_norm = child<NormImpl>(model, "final_norm");
  TORCH_CHECK(token_embedding && final_norm, "the model has no token embedding or final norm");
  std::optional<ScopedAutocast> autocast;
  if (trainer.autocast()) autocast.emplace(*trainer.autocast());
  std::vector<torch::Tensor> outputs;
  torch::Tensor h = token_embedding->forward(tokens);
  if (position_embedding) {
    const torch::Tensor positions = torch::arange(
        tokens.size(1), torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
    h = h + position_embedding->forward(positions);
  }
  outputs.push_back(h);
  for (const auto& sublayer : model.sublayers()) {
    h = sublayer->forward(h);
    outputs.push_back(h);
  }
  const torch::Tensor hidden = final_norm->forward(h);
  outputs.push_back(chunked_cross_entropy(hidden.reshape({-1, config.d_model}), model.head_weight(),
                                          targets.reshape({-1}), config.loss_chunk_count()));
  return outputs;
}

// After backward: each parameter's extremes and non-finite values, and which have no gradient.
void check_parameters(TransformerImpl& model, ChainWalk& walk) {
  for (const auto& item : model.named_parameters()) {
    PieceCheck& piece = walk.pieces[piece_of(item.key(), walk.pieces.size())];
    piece.max_abs_param = std::max(piece.max_abs_param, max_abs_finite(item.value()));
    piece.nonfinite_params += nonfinite_count(item.value());
    // A fine-tuned model's base is frozen by design, and counted as none of those that train;
    // anywhere else a frozen parameter is one that silently stopped training.
    if (model.config().lora.enabled() && !item.value().requires_grad()) continue;
    ++walk.params_total;
    const torch::Tensor& grad = item.value().grad();
    if (!grad.defined()) {
      walk.params_without_gradient.push_back(item.key());
    } else if (piece.nonfinite_param_grad.empty() && nonfinite_count(grad) > 0) {
      piece.nonfinite_param_grad = item.key();
    }
  }
}

}  // namespace

ChainWalk walk_chain(Trainer& trainer) {
  TransformerImpl& model = *trainer.model();

  ChainWalk walk;
  const auto named = [](std::string name) {
    PieceCheck check;
    check.name = std::move(name);
    return check;
  };
  walk.pieces.push_back(named("embedding"));
  for (std::size_t i = 0; i < model.sublayers().size(); ++i) {
    walk.pieces.push_back(named((i % 2 == 0 ? "attn" : "mlp") + std::to_string(i / 2)));
    // Plain autograd inside the attention core as well: the walk is the `none` computation.
    if (auto attention = std::dynamic_pointer_cast<AttentionSublayer>(model.sublayers()[i])) {
      attention->set_recompute_core(false);
    }
  }
  walk.pieces.push_back(named("head"));
  const std::size_t head = walk.pieces.size() - 1;

  // A gradient no backward reaches stays undefined: that is how a missing one shows.
  for (auto& param : model.parameters()) param.mutable_grad() = torch::Tensor();

  const int64_t accum = trainer.config().accum;
  // The walk's backward starts from loss / accum, unscaled: so do the experts' balance losses.
  if (BalanceLedger* balance = model.balance()) {
    balance->set_gradient_scale(1.0 / static_cast<double>(accum));
  }
  double loss_sum = 0.0;
  for (int64_t micro = 0; micro < accum; ++micro) {
    const TokenBatch batch = trainer.next_batch();
    const torch::Tensor tokens = batch.tokens.to(trainer.device());
    const torch::Tensor targets = batch.targets.to(trainer.device());
    std::vector<torch::Tensor> outputs = forward_by_piece(trainer, tokens, targets);
    const torch::Tensor loss = outputs.back() / static_cast<double>(accum);
    outputs.back() = loss;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      PieceCheck& piece = walk.pieces[i];
      piece.nonfinite_outputs += nonfinite_count(outputs[i]);
      piece.max_abs_output = std::max(piece.max_abs_output, max_abs_finite(outputs[i]));
      if (i != head && outputs[i].requires_grad()) {
        outputs[i].register_hook([&piece](const torch::Tensor& grad) {
          if (!torch::isfinite(grad).all().item<bool>()) piece.output_grad_finite = false;
        });
      }
    }
    loss.backward();
    loss_sum += loss.item<double>() * static_cast<double>(accum);
  }
  walk.loss = loss_sum / static_cast<double>(accum);

  check_parameters(model, walk);
  return walk;
}

}  // namespace rematlab::advise
