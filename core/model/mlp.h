// The MLP sublayer of both families: x + dropout(mlp(norm(x))). GPT: Linear(d, 4d) → GELU →
// Linear(4d, d), with biases. Llama: SwiGLU, down(silu(gate(x)) · up(x)), no biases; gate and up
// are one fused projection (the same weights as two, in one matrix multiply).
#pragma once

#include <torch/torch.h>

#include "model/lora.h"
#include "model/model_config.h"
#include "model/norm.h"
#include "model/quantised_projection.h"
#include "model/sublayer.h"
#include "model/tensor_parallel_layout.h"

namespace rematlab {

class MlpSublayer : public Sublayer {
 public:
  explicit MlpSublayer(const ModelConfig& config);
  SublayerTail forward_until_tail(const torch::Tensor& x) override;
  // Keeps this rank's part of the hidden width: the up (and gate) projection's rows and bias,
  // the down projection's columns; the down projection's bias stays whole, added after the sum.
  void split_for_tensor_parallel(const TensorParallel& group, TensorParallelLayout& layout,
                                 bool sequence_parallel);
  // Fine-tuning: adapters on the projections `lora` targets among gate, up and down.
  void attach_lora(const LoraOptions& lora);
  // A frozen base stored quantised: the up (gate-and-up) and down projections dequantise as
  // they run.
  void quantise_projections(QuantisedFormat format);

 private:
  Norm norm_{nullptr};
  torch::nn::Linear up_{nullptr};  // GPT: up; Llama: [gate; up]
  torch::nn::Linear down_{nullptr};
  LoraBranch up_lora_{nullptr};  // fine-tuning only
  LoraBranch down_lora_{nullptr};
  QuantisedWeightPtr up_quantised_;  // a quantised base only
  QuantisedWeightPtr down_quantised_;
  ModelFamily family_;
  double dropout_;
  TensorParallel group_;            // null: the whole layer on this process
  bool sequence_parallel_ = false;  // x is this rank's slice of the sequence
};

}  // namespace rematlab
