#include "estimate/tensor_layout.h"

#include <algorithm>
#include <string>

#include "common/errors.h"
#include "estimate/sharded_units.h"
#include "run/run_config.h"

namespace rematlab::estimate {
namespace {

bool kv_split(const Architecture& arch, int64_t tp) { return arch.kv_heads % tp == 0; }

}  // namespace

void validate(const TensorLayout& layout) {
  if (layout.tp < 1 || layout.tp > kMaxWorldSize) {
    throw InvalidInput("--tp", "must be between 1 and " + std::to_string(kMaxWorldSize) + ", got " +
                                   std::to_string(layout.tp));
  }
  if (layout.tp == 1 && layout.sequence_parallel) {
    throw InvalidInput("--sequence-parallel", "splits the sequence between tensor ranks: give " +
                                                  setting("tp", "2") + " or more");
  }
}

void validate(const Architecture& arch, const TensorLayout& layout) {
  validate(layout);
  const int64_t tp = layout.tp;
  if (tp == 1) return;
  ModelConfig shape;
  shape.heads = arch.heads;
  shape.kv_heads = arch.kv_heads;
  shape.mlp_hidden = arch.mlp_hidden;
  shape.moe = arch.moe;
  shape.moe.expert_hidden = arch.expert_hidden;
  shape.vocab = arch.vocab;
  shape.seq_len = arch.seq_len;
  validate_tensor_split(shape, tp, layout.sequence_parallel);
}

int64_t rank_kv_projected(const Architecture& arch, int64_t tp) {
  return kv_split(arch, tp) ? arch.kv_dim() / tp : arch.kv_dim();
}

int64_t rank_kv_used(const Architecture& arch, int64_t tp) {
  return kv_split(arch, tp) ? arch.kv_dim() / tp : arch.head_dim();
}

int64_t rank_parameter_count(const Architecture& arch, int64_t tp) {
  if (tp == 1) return parameter_count(arch);
  const UnitParameters units = unit_parameter_counts(arch, tp);
  return units.ends + arch.layers * (units.attention + units.mlp);
}

int64_t rank_largest_parameter_count(const Architecture& arch, int64_t tp) {
  if (tp == 1) return largest_parameter_count(arch);
  const int64_t d = arch.d_model;
  const int64_t mlp_width = arch.moe.enabled()
                                ? std::max(arch.expert_hidden, arch.moe.shared_expert_hidden)
                                : arch.mlp_hidden;
  return std::max({arch.vocab / tp * d, arch.learned_positions ? arch.seq_len * d : 0,
                   (arch.q_dim() / tp + 2 * rank_kv_projected(arch, tp)) * d, arch.q_dim() / tp * d,
                   (arch.gated_mlp ? 2 : 1) * mlp_width / tp * d,
                   arch.moe.enabled() ? arch.moe.experts * d : 0});
}

}  // namespace rematlab::estimate
