// The model states one rank of a data-parallel run holds under ZeRO-style sharding: the
// weights stay whole on every rank; `optimizer` divides the optimizer state (AdamW's moments and
// the fp32 master copy, which the optimizer owns) among the ranks; `gradients` divides the
// gradients too. Matches what core/parallel measures, up to padding each gradient bucket to a
// multiple of the world size (at most world − 1 values per bucket).
#pragma once

#include <string>

#include "estimate/model_state.h"

namespace rematlab::estimate {

// Throws InvalidInput("--nproc" or "--shard", …) for a world size below 1 or an unknown mode.
ModelStateBytes per_rank_model_states(const ModelStateBytes& whole, int64_t world_size,
                                      const std::string& shard);

}  // namespace rematlab::estimate
