#include "estimate/sharded_units.h"

#include <algorithm>

#include "estimate/model_state.h"

namespace rematlab::estimate {

UnitParameters unit_parameter_counts(const Architecture& arch) {
  const int64_t d = arch.d_model;
  const int64_t norm = arch.rms_norm ? d : 2 * d;
  const int64_t qkv = d + 2 * arch.kv_dim();
  const int64_t up = (arch.gated_mlp ? 2 : 1) * arch.mlp_hidden;
  UnitParameters units;
  units.attention = norm + d * qkv + d * d + (arch.biases ? qkv + d : 0);
  units.mlp = norm + d * up + arch.mlp_hidden * d + (arch.biases ? up + d : 0);
  units.ends = arch.vocab * d * (arch.tied_head ? 1 : 2) +
               (arch.learned_positions ? arch.seq_len * d : 0) + norm;
  return units;
}

int64_t gathered_unit_bytes(const Architecture& arch, Precision precision) {
  const UnitParameters units = unit_parameter_counts(arch);
  return 2 * bytes_per_value(precision) * (units.ends + std::max(units.attention, units.mlp));
}

}  // namespace rematlab::estimate
