// Rotary position embeddings (Llama): query and key vectors are rotated by an angle that grows
// with the position, pair of dimensions by pair, so attention scores depend on relative
// position. No weights; the cos/sin tables are computed once per model.
#pragma once

#include <torch/torch.h>

namespace rematlab {

struct RotaryTables {
  torch::Tensor cos;  // (seq_len, head_dim): each frequency twice, for the two halves
  torch::Tensor sin;
};

// Frequencies theta^(-2i/head_dim), i < head_dim/2, at positions 0 … seq_len-1 (fp32).
RotaryTables make_rotary_tables(int64_t seq_len, int64_t head_dim, double theta);

// Rotates x (batch, heads, seq, head_dim) by the first seq rows of the tables: the half-split
// form, x·cos + rotate_half(x)·sin, where rotate_half([a, b]) = [-b, a].
torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& tables);

}  // namespace rematlab
