#include "model/mlp.h"

#include "checkpoint/kept_outputs.h"
#include "model/gathered_projection.h"
#include "model/initialisation.h"
#include "model/swiglu.h"

namespace rematlab {

MlpSublayer::MlpSublayer(const ModelConfig& config)
    : family_(config.family), dropout_(config.dropout) {
  const int64_t d = config.d_model;
  const int64_t hidden = config.mlp_width();
  const bool gated = family_ == ModelFamily::kLlama;
  const bool bias = !gated;
  norm_ = register_module("norm", Norm(family_, d));
  up_ = register_module(
      "up", torch::nn::Linear(torch::nn::LinearOptions(d, gated ? 2 * hidden : hidden).bias(bias)));
  down_ =
      register_module("down", torch::nn::Linear(torch::nn::LinearOptions(hidden, d).bias(bias)));
  initialise_linear(up_, kProjectionStd);
  initialise_linear(down_, residual_projection_std(config));
}

void MlpSublayer::split_for_tensor_parallel(const TensorParallel& group,
                                            TensorParallelLayout& layout, bool sequence_parallel) {
  TORCH_CHECK(!up_quantised_, "a quantised base split over tensor ranks is not built");
  const int64_t hidden = down_->weight.size(1);
  const RowRange mine = part_of(hidden, group->size(), group->rank());
  std::vector<RowRange> rows = {mine};
  // Llama's [gate; up]: this rank's rows of each half.
  if (family_ == ModelFamily::kLlama) rows.push_back({hidden + mine.first, mine.count});
  keep_rows(up_->weight, rows);
  if (up_->bias.defined()) keep_rows(up_->bias, rows);
  keep_columns(down_->weight, mine);
  layout.split.push_back(up_->weight);
  if (up_->bias.defined()) layout.split.push_back(up_->bias);
  layout.split.push_back(down_->weight);
  group_ = group;
  sequence_parallel_ = sequence_parallel;
}

void MlpSublayer::attach_lora(const LoraOptions& lora) {
  const int64_t hidden = down_->weight.size(1);
  const int64_t d = down_->weight.size(0);
  const bool gated = family_ == ModelFamily::kLlama;
  std::vector<LoraSlice> slices;  // Llama's fused [gate; up], or GPT's up
  if (gated && lora.adapts(kLoraGate)) slices.push_back({0, hidden});
  if (lora.adapts(kLoraUp)) slices.push_back({gated ? hidden : 0, hidden});
  if (!slices.empty()) {
    up_lora_ = register_module("up_lora",
                               LoraBranch(d, up_->weight.size(0), slices, lora.rank, lora.scale()));
  }
  if (lora.adapts(kLoraDown)) {
    down_lora_ = register_module("down_lora", LoraBranch(hidden, d, std::vector<LoraSlice>{{0, d}},
                                                         lora.rank, lora.scale()));
  }
}

void MlpSublayer::quantise_projections(QuantisedFormat format) {
  TORCH_CHECK(!group_, "a quantised base split over tensor ranks is not built");
  up_quantised_ = quantise_projection(*up_, format);
  down_quantised_ = quantise_projection(*down_, format);
}

SublayerTail MlpSublayer::forward_until_tail(const torch::Tensor& x) {
  torch::Tensor hidden;
  {  // the norm's output goes before the activation runs
    const torch::Tensor normed = norm_(x);
    // Token-wise from here to the scatter: the gathered sequence stays rank after rank.
    hidden = column_projection(KeptOutput::kMlpIn, normed, up_->weight, up_->bias, group_,
                               sequence_parallel_, up_quantised_, GatheredOrder::kRankMajor);
    if (up_lora_) hidden = up_lora_->add_to(hidden, normed);
  }
  if (family_ == ModelFamily::kLlama) {
    hidden = swiglu(hidden);
  } else {
    hidden = torch::gelu(hidden);
  }
  return {x,
          hidden,
          down_->weight,
          down_->bias,
          dropout_,
          is_training(),
          std::nullopt,
          group_,
          sequence_parallel_,
          GatheredOrder::kRankMajor,
          nullptr,
          adapter_term_of(down_lora_),
          down_quantised_};
}

}  // namespace rematlab
