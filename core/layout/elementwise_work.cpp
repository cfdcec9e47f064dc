#include "layout/elementwise_work.h"

namespace rematlab::layout {

ElementwiseValues block_elementwise_values(const estimate::Architecture& arch) {
  const auto h = static_cast<double>(arch.d_model);
  const auto q = static_cast<double>(arch.q_dim());
  const auto kv = static_cast<double>(arch.kv_dim());
  ElementwiseValues values;
  // Each norm reads its input and writes its output; each residual add reads two and writes one.
  values.replicated = 2.0 * 2.0 * h + 2.0 * 3.0 * h;
  // Dropout after each sublayer: reads, writes, and writes its mask.
  if (arch.dropout > 0.0) values.replicated += 2.0 * 3.0 * h;
  // The attention's output laid back out from heads to the residual stream's order.
  values.split = 2.0 * q;
  if (arch.rotary) values.split += 2.0 * 2.0 * (q + kv);  // queries and keys rotated
  if (arch.qk_norm) values.split += 2.0 * (q + kv);       // each head's q and k normalised
  auto activation = [&](double width) {  // SwiGLU: SiLU of the gate, times the up projection
    return arch.gated_mlp ? 2.0 * width + 3.0 * width : 2.0 * width;
  };
  if (arch.moe.enabled()) {
    const auto k = static_cast<double>(arch.moe.experts_per_token);
    const int64_t width = arch.expert_hidden > 0 ? arch.expert_hidden : arch.mlp_hidden;
    values.split += k * activation(static_cast<double>(width));
    values.replicated += k * 2.0 * h;         // each expert's output weighted and added in
    if (arch.moe.shared_expert_hidden > 0) {  // and the gated shared expert's
      values.split += activation(static_cast<double>(arch.moe.shared_expert_hidden));
      values.replicated += 3.0 * h;
    }
  } else {
    values.split += activation(static_cast<double>(arch.mlp_hidden));
  }
  return values;
}

double rank_forward_values(const ElementwiseValues& block, int64_t tp, bool sequence_parallel) {
  const auto ranks = static_cast<double>(tp);
  return (sequence_parallel ? block.replicated / ranks : block.replicated) + block.split / ranks;
}

double engine_collective_values(const estimate::Architecture& arch, int64_t tp,
                                bool sequence_parallel, bool rerun) {
  if (tp <= 1) return 0.0;
  const auto h = static_cast<double>(arch.d_model);
  const double again = rerun ? 2.0 : 0.0;
  if (!sequence_parallel) return (4.0 + again) * 2.0 * h;  // each all-reduce's input copied
  const double gathers = 6.0 + again;                      // as make_stage_work counts them
  const double scatters = 4.0 + again;
  return gathers * 2.0 * h + scatters * (3.0 * h + h / static_cast<double>(tp));
}

double engine_expert_values(const estimate::Architecture& arch, int64_t ep, bool rerun) {
  if (ep <= 1 || !arch.moe.enabled()) return 0.0;
  const double rows = static_cast<double>(arch.moe.experts_per_token) * arch.expert_rank_load;
  // Each copy reads a row and writes it: forward once, backward once, a recomputation once more.
  return (2.0 + (rerun ? 1.0 : 0.0)) * rows * 2.0 * static_cast<double>(arch.d_model);
}

}  // namespace rematlab::layout
