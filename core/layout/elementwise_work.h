// The element-wise work of a block (norms, residual adds, activation functions, heads merged
// back, rotary positions): the part of a step that does not run at the matmuls' rate. The layout
// planner times it by memory bandwidth, as values read and written. What tensor ranks repeat
// whole without sequence parallelism — the residual stream's work — is counted apart from what
// they split, so that tensor parallelism is not taken to divide all of a step by its degree.
// docs/layout.md gives the counts and how they were checked.
#pragma once

#include "estimate/architecture.h"

namespace rematlab::layout {

// Values one block's forward reads and writes per token (backward: twice as many).
struct ElementwiseValues {
  // The residual stream's: two norms, two residual adds, dropout; a mixture's weighted sum of its
  // experts' outputs, which each tensor rank forms at full width.
  double replicated = 0.0;
  double split = 0.0;  // the heads' and the MLP's: heads merged, rotary, q/k norms, activation
};
ElementwiseValues block_elementwise_values(const estimate::Architecture& arch);

// Values one tensor rank reads and writes per token in one block's forward (its backward: twice
// as many; a recomputation: once more).
double rank_forward_values(const ElementwiseValues& block, int64_t tp, bool sequence_parallel);

// What RematLab's engine adds per token and block around its tensor-parallel collectives (its
// activations are batch-major): a copy of each all-reduce's input; under sequence parallelism
// each gathered sequence concatenated from the ranks' pieces, and each reduce-scatter's input
// reordered by rank and its received slices summed. Megatron-LM, sequence-major, gathers and
// scatters in place; the planner counts these for the engine only.
double engine_collective_values(const estimate::Architecture& arch, int64_t tp,
                                bool sequence_parallel, bool rerun);

// What RematLab's engine adds per token and block over expert ranks (ep > 1), at the fullest
// rank (arch.expert_rank_load): the rows each held expert receives from every rank concatenated
// before it runs, and their gradients after backward's split; one process runs its experts on
// views of the rows it grouped. Forward's rows are the token's k choices, d_model wide.
double engine_expert_values(const estimate::Architecture& arch, int64_t ep, bool rerun);

}  // namespace rematlab::layout
