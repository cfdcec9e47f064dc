// The token embedding and the output head split over the vocabulary between tensor ranks: rank
// r holds rows [first, first + rows) of the (vocab, d) matrix. Neither forms the full logits, or
// any (tokens, vocab) tensor, on any rank.
#pragma once

#include <torch/torch.h>

#include "collective/parallel_region.h"

namespace rematlab {

struct VocabShard {
  int64_t first = 0;  // the first vocabulary row this rank holds
  int64_t rows = 0;
};

// The embeddings of `tokens` (batch, seq) → (batch, seq, d), summed over ranks: each rank looks
// up the tokens it holds and gives zeros for the others. With `sequence_parallel` the sum is
// scattered: this rank gets its slice of the sequence (batch, seq / ranks, d).
torch::Tensor vocab_parallel_embedding(const torch::Tensor& tokens, const torch::Tensor& weight,
                                       const VocabShard& shard, const TensorParallel& group,
                                       bool sequence_parallel);

// Mean cross-entropy of `targets` (tokens) from `hidden` (tokens, d), identical on every rank,
// through the head shard `weight` (rows, d), in `chunks` slices of the tokens: per slice the
// maximum logit, the sum of exponentials and the target's logit are combined over ranks (two
// small all-reduces: a maximum, then both sums together), and backward recomputes each slice's
// logits. `hidden` must be the same on every rank; its gradient here is this rank's columns' part
// only, which the caller's region edge (into_region, gather_sequence) sums over the ranks.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                           const torch::Tensor& targets, const VocabShard& shard,
                                           int64_t chunks, const TensorParallel& group);

}  // namespace rematlab
