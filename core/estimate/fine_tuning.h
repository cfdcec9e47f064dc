// Fine-tuning with adapters (LoRA) as the estimator counts it: a frozen base holds its weights
// alone, as --base-precision stores them; only the adapters have gradients, optimizer state and,
// under 16-bit training, fp32 copies.
#pragma once

#include <cstdint>

#include "common/precision.h"
#include "estimate/architecture.h"
#include "estimate/model_state.h"

namespace rematlab::estimate {

// The engine's model for `arch` (its family read from the shape: a gated MLP is Llama's), with
// its adapters, so that the engine's own counts apply.
ModelConfig to_model_config(const Architecture& arch);

// The parameters a step updates: the adapters' under LoRA, else all of them.
int64_t trainable_parameter_count(const Architecture& arch);

// Model states of one process fine-tuning `arch` (arch.lora enabled; over data ranks
// per_rank_model_states shards what trains and leaves the base whole): the frozen base's bytes are
// weights; the adapters' states are those of any trained parameter.
ModelStateBytes fine_tuning_state_bytes(const Architecture& arch, Precision precision,
                                        Optimizer optimizer);

}  // namespace rematlab::estimate
