// What fully sharded parameters (--shard parameters, core/parallel/fully_sharded.h) hold whole
// beside the activations: the units the engine gathers (model/parameter_units.h) are unit 0 (the
// embeddings, the final norm and the head) and one unit per sublayer. Unit 0 is whole from the
// start of forward to the end of backward, its gradients from the head's backward to the
// embedding's. Besides it, two sublayer units' worth: in forward the running unit and the next
// one being gathered; in backward a unit's weights and the gradients it forms (the previous
// unit's sum ends before those take memory), or, once it is done, its gradients being summed and
// the next unit being gathered.
#pragma once

#include <cstdint>

#include "common/precision.h"
#include "estimate/architecture.h"

namespace rematlab::estimate {

struct UnitParameters {
  int64_t ends = 0;       // unit 0
  int64_t attention = 0;  // one attention sublayer (its norm included)
  int64_t mlp = 0;        // one MLP sublayer (its norm included)
};

// Exact, as the engine's units hold them on one of `tp` tensor ranks:
// ends + layers × (attention + mlp) = rank_parameter_count (parameter_count when tp is 1).
UnitParameters unit_parameter_counts(const Architecture& arch, int64_t tp = 1);

// Bytes of whole units and their gradients a rank holds at most beside its activations under
// --shard parameters, with weights in `precision` (as model_state_bytes counts them; the engine
// keeps fp32 weights under autocast, twice this under bf16): unit 0 and its gradients, and the
// largest sublayer unit twice over; each of them one tensor rank's part of it.
int64_t gathered_unit_bytes(const Architecture& arch, Precision precision, int64_t tp = 1);

// What a rank's device holds before it shards its part of the model: that part's fp32 weights
// whole. (Every rank builds the whole model in host memory and splits it there over tensor
// ranks; only its part reaches the device.)
inline int64_t model_build_bytes(int64_t rank_params) { return 4 * rank_params; }

}  // namespace rematlab::estimate
