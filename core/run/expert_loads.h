// A mixture of experts' loads, as runs record them and `estimate` and `layout` take them: how
// far a router's choices strayed from every expert (and every expert rank) taking its share,
// which the activations must hold room for; the bounds no router can pass, and their checks.
#pragma once

#include <cstdint>
#include <optional>

#include "model/moe_options.h"

namespace rematlab {

// The most rows one of `expert_ranks` ranks' experts can take over its own tokens' rows (its
// rank load): every token of the group sends it as many of its k choices as it holds experts,
// at most k (under a capacity factor, E/k if more: its own rows cut to k experts' capacity).
// 1 without expert ranks.
double most_expert_rank_load(const MoeOptions& moe, int64_t expert_ranks);
// A fullest expert rank's loads (a run's `expert_rank_load` and `expert_block_load`, or what
// `estimate` and `layout` are given), each from 1 (balanced) to most_expert_rank_load, the
// busiest block's, where given, at least the step's; throws InvalidInput naming the flag
// (`--expert-rank-load`, `--expert-block-load`) otherwise, or when one other than 1 is given
// without expert ranks.
void validate_expert_loads(double rank_load, std::optional<double> block_load,
                           const MoeOptions& moe, int64_t expert_ranks);
// The busiest expert's load (a run's `expert_load`: its rows in a block's forward over its even
// share) lies from 1 to E / k (it takes at most one of a token's k choices); throws
// InvalidInput("--expert-load", …) otherwise.
double most_expert_load(const MoeOptions& moe);
void validate_expert_load(double load, const MoeOptions& moe);

}  // namespace rematlab
