// The model states one rank of a data-parallel run holds between steps under ZeRO-style
// sharding: `optimizer` divides the optimizer state (AdamW's moments and the fp32 master copy,
// which the optimizer owns) among the ranks; `gradients` divides the gradients too;
// `parameters` the weights as well (what it holds whole while it runs: sharded_units.h). Matches
// what core/parallel measures, up to padding each gradient bucket (each unit under `parameters`) to
// a multiple of the world size (at most world − 1 values each).
#pragma once

#include <string>

#include "estimate/model_state.h"

namespace rematlab::estimate {

// Throws InvalidInput("--nproc" or "--shard", …) for a world size below 1 or an unknown mode.
ModelStateBytes per_rank_model_states(const ModelStateBytes& whole, int64_t world_size,
                                      const std::string& shard);

}  // namespace rematlab::estimate
