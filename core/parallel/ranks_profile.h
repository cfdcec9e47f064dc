// `--checkpoint plan:BUDGET` over several ranks: every rank measures its own chain at once (its
// part of a model split over tensor ranks, whose collectives run inside the pieces and meet),
// and all of them take the largest of each figure. Every rank then plans the same segments from
// the same costs, as it must (a recomputed segment runs its collectives again: the ranks have to
// recompute alike), and the plan holds on the slowest and fullest rank.
#pragma once

#include <atomic>

#include "parallel/gradient_exchange.h"
#include "run/chain_costs.h"
#include "run/run_config.h"

namespace rematlab::parallel {

// The chain costs of `config` (whose policy is plan:BUDGET), measured on every rank of
// `exchange` and agreed on, keyed as plan/profile_key.h keys them. A collective: every rank
// calls it. Throws plan::ProfileCancelled when `cancel` is set.
KnownChainCosts profile_over_ranks(const RunConfig& config, GradientExchange& exchange,
                                   const std::atomic<bool>* cancel);

// The largest of each figure of `costs` over the ranks of `exchange` (each the same shape).
ChainCosts largest_over_ranks(const ChainCosts& costs, GradientExchange& exchange);

}  // namespace rematlab::parallel
