// Where the evaluator splits the blocks between pipeline chunks: as --pp-split gives them, the
// engine's rule, or (--pp-split balanced) the split the engine's own balancing picks from the
// chain's costs, here the planner's predicted ones.
#include <stdexcept>

#include "layout/layout_evaluator.h"
#include "layout/layout_rules.h"
#include "plan/balanced_split.h"

namespace rematlab::layout {

std::vector<int64_t> LayoutEvaluator::chain_split(const Layout& layout) {
  const int64_t layers = request_.arch.layers;
  const int64_t chunks = layout.pp * layout.vp;
  if (!request_.fixed.pp_split.empty()) {  // checked against the pipeline by validate_split
    if (static_cast<int64_t>(request_.fixed.pp_split.size()) != chunks) {
      throw std::logic_error("a --pp-split for another pipeline evaluated");
    }
    return request_.fixed.pp_split;
  }
  if (!request_.fixed.pp_split_balanced || chunks < 2) {
    return rule_split(layers, layout.pp, layout.vp);
  }
  const SplitKey key{chunks, layout.tp, layout.sp, layout.cp, layout.ep, layout.micro_batch};
  const auto found = split_cache_.find(key);
  if (found != split_cache_.end()) return found->second;
  // One micro-batch's predicted time through a block, and through a block with the head and
  // loss (the embedding is a lookup): its compute and the collectives that wait on it, without
  // recomputation, which the balancing leaves to the policy chosen after it.
  auto block_with = [&](bool head) {
    Stage one;
    one.chunks = {1};
    one.layers = one.chunk_layers = 1;
    one.head = head;
    const StageWork work = make_stage_work(layout, one, 0);
    return work.compute_s + work.elementwise_s + work.tensor_s + work.experts_s + work.context_s;
  };
  const double block = block_with(false);
  ChainCosts costs;
  for (int64_t sublayer = 0; sublayer < 2 * layers; ++sublayer) {
    // A block's time, half on each of its sublayers: the chunks hold whole blocks.
    rematlab::StageCost half;
    half.forward_ms = block / 6.0;
    half.backward_ms = block / 3.0;
    costs.stages.push_back(half);
  }
  costs.head_ms = block_with(true) - block;
  return split_cache_.emplace(key, plan::balanced_chunk_blocks(costs, chunks).chunk_blocks)
      .first->second;
}

}  // namespace rematlab::layout
