// Where the evaluator splits the blocks between pipeline chunks: as --pp-split gives them, the
// engine's rule, or (--pp-split balanced) the split the engine's own balancing picks from the
// chain's costs, here the planner's predicted ones.
#include "layout/layout_evaluator.h"
#include "layout/layout_rules.h"
#include "plan/balanced_split.h"

namespace rematlab::layout {

std::vector<int64_t> LayoutEvaluator::chain_split(const Layout& layout) {
  const int64_t layers = request_.arch.layers;
  const int64_t chunks = layout.pp * layout.vp;
  // Given (validate_split: beside a fixed pipeline, one count for each of its chunks).
  if (!request_.fixed.pp_split.empty()) return request_.fixed.pp_split;
  if (!request_.fixed.pp_split_balanced || chunks < 2)
    return rule_split(layers, layout.pp, layout.vp);
  const std::tuple<int64_t, int64_t, bool> key{chunks, layout.tp, layout.sp};
  const auto found = split_cache_.find(key);
  if (found != split_cache_.end()) return found->second;
  // One micro-batch's FLOPs at this layout's tensor split, a block's and the head's and loss's
  // (the embedding is a lookup): what each costs is in proportion to them, and only the
  // proportions decide the split. Forward a third, backward two.
  const double block = chunk_flops(layout, 1, 0, false, false).model;
  const double head = chunk_flops(layout, 1, 0, false, true).model - block;
  ChainCosts costs;
  for (int64_t sublayer = 0; sublayer < 2 * layers; ++sublayer) {
    rematlab::StageCost
        half;  // a block's work, half on each of its sublayers: chunks hold whole blocks
    half.forward_ms = block / 6.0;
    half.backward_ms = block / 3.0;
    costs.stages.push_back(half);
  }
  costs.head_ms = head;
  costs.fixed_ms = head;
  return split_cache_.emplace(key, plan::balanced_chunk_blocks(costs, chunks).chunk_blocks)
      .first->second;
}

}  // namespace rematlab::layout
