#include "estimate/sharded_units.h"

#include <algorithm>

#include "estimate/model_state.h"
#include "estimate/tensor_layout.h"

namespace rematlab::estimate {

UnitParameters unit_parameter_counts(const Architecture& arch, int64_t tp) {
  const int64_t d = arch.d_model;
  const int64_t norm = arch.rms_norm ? d : 2 * d;  // replicated on every tensor rank
  const int64_t q = arch.q_dim() / tp;
  const int64_t qkv = q + 2 * rank_kv_projected(arch, tp);
  const int64_t up = (arch.gated_mlp ? 2 : 1) * arch.mlp_hidden / tp;
  // Column-parallel layers keep their rows of the bias; row-parallel ones the whole bias.
  UnitParameters units;
  const int64_t attention_biases = arch.biases ? qkv + d : arch.qkv_bias ? qkv : 0;
  const int64_t head_norms = arch.qk_norm ? 2 * arch.head_dim() : 0;  // replicated
  units.attention = norm + head_norms + d * qkv + q * d + attention_biases;
  units.mlp = norm + d * up + (arch.mlp_hidden / tp) * d + (arch.biases ? up + d : 0);
  if (arch.moe.enabled()) {  // each expert split by width; the router and shared gate whole
    const int64_t shared = arch.moe.shared_expert_hidden / tp;
    units.mlp = norm + d * arch.moe.experts + arch.moe.experts * 3 * d * (arch.expert_hidden / tp) +
                (shared > 0 ? 3 * d * shared + d : 0);
  }
  units.ends = arch.vocab / tp * d * (arch.tied_head ? 1 : 2) +
               (arch.learned_positions ? arch.seq_len * d : 0) + norm;
  return units;
}

int64_t gathered_unit_bytes(const Architecture& arch, Precision precision, int64_t tp) {
  const UnitParameters units = unit_parameter_counts(arch, tp);
  return 2 * bytes_per_value(precision) * (units.ends + std::max(units.attention, units.mlp));
}

}  // namespace rematlab::estimate
