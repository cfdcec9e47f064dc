// The checkpoint policies the layout planner takes for a pipeline's ranks: the ones its search
// weighs (none, selective, every:K) and, where given, any the engine runs on a chunk of blocks
// (sublayer strides, segment lists: what plan:BUDGET chooses), one per pipeline rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_policy.h"

namespace rematlab::layout {

// Whether the search weighs `policy` for every stage: none, selective or every:K.
bool is_searched_policy(const CheckpointPolicy& policy);

// `policy` (part of `whole`) as its canonical text where the planner evaluates it on a chunk of
// blocks: a searched one, sublayer: or segments:. Else InvalidInput("--checkpoint") naming
// `whole` (plan: before it is resolved, schedule:, keep:).
std::string evaluated_policy(const CheckpointPolicy& policy, const std::string& whole);

// One entry per pipeline rank from `text`, read as the engine reads it: one of the searched
// policies for every chunk; stages: with one policy for each of the pp · vp model chunks in chain
// order (chunk c on rank c mod pp, its (c / pp)-th); or sublayer: or segments: planned over the
// whole chain and cut at the chunks' edges (cut_at_chunks; `split`: each chunk's blocks in chain
// order, needed for these alone). A rank whose chunks have different policies gets them joined
// by '/' in its chunks' order ("none/segments:a0,m0"); chunk_policies() splits them again. Throws
// InvalidInput("--checkpoint") for what evaluated_policy() refuses and for a stages: list of
// another count.
std::vector<std::string> rank_policies(const std::string& text, int64_t pp, int64_t vp,
                                       const std::vector<int64_t>& split);

// `policy` planned over the chain of `split`'s chunks, as the engine plans it, and cut at their
// edges: each chunk's part as a segment list of its own blocks from a0 (a recomputed segment
// that crosses an edge is recomputed on each side, from that side's input), or none.
std::vector<std::string> cut_at_chunks(const CheckpointPolicy& policy,
                                       const std::vector<int64_t>& split);

// A rank's entry as rank_policies() writes it, one policy per chunk of the rank (`chunks` of
// them; the one entry for all when they share it).
std::vector<std::string> chunk_policies(const std::string& rank_policy, size_t chunks);

// Throws InvalidInput("--checkpoint") when a rank's policy names a sublayer one of its chunks
// does not have (`split`: each chunk's blocks in chain order).
void check_named_blocks(const std::vector<std::string>& rank_policies,
                        const std::vector<int64_t>& split, int64_t pp);

}  // namespace rematlab::layout
