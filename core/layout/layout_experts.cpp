// Expert parallelism's share of a stage's work: the all-to-alls that carry tokens to their
// experts' ranks and back, and the rows the fullest rank runs beyond its share.
#include "estimate/model_state.h"
#include "layout/collective_time.h"
#include "layout/layout_evaluator.h"

namespace rematlab::layout {

void LayoutEvaluator::add_expert_exchange(const Layout& layout, double tokens, double layers,
                                          double rerun, double speed, StageWork& work) const {
  const estimate::Architecture& arch = request_.arch;
  const int64_t w = estimate::bytes_per_value(request_.precision);
  // Per block: forward dispatches each token's k copies to their experts' ranks and combines
  // what returns; backward sends their gradients the same two ways; every:K dispatches and
  // combines again (a segment list: its share of the blocks' forward). The fullest rank takes its
  // load's share more rows than it sends.
  const double load = arch.expert_rank_load;
  const double rows = tokens * static_cast<double>(arch.moe.experts_per_token);
  const double bytes = rows * static_cast<double>(arch.d_model * w) * load;
  // Expert ranks are neighbours but for the tensor ranks between them (Megatron-LM folds the
  // context ranks into its expert groups).
  const int64_t span = layout.tp * layout.ep;
  work.experts_s =
      layers * (4.0 + 2.0 * rerun) * all_to_all_seconds(request_.cluster, layout.ep, span, bytes);
  if (request_.engine_only) {
    // RematLab's engine first exchanges how many rows each expert gets (its split sizes are
    // host integers), each time it dispatches forward: one more all-to-all, of a count each.
    const double counts = static_cast<double>(arch.moe.experts * 8);
    work.experts_s +=
        layers * (1.0 + rerun) * all_to_all_seconds(request_.cluster, layout.ep, span, counts);
  }
  // Its experts run those rows too, and every rank waits for it at the combine: a row's
  // forward through an expert is 6·d·f FLOPs (gate, up, down), its backward twice that, a
  // recomputation once more.
  const double more_rows_s = (load - 1.0) * layers * rows * 6.0 *
                             static_cast<double>(arch.d_model * arch.expert_hidden) / speed;
  work.compute_s += 3.0 * more_rows_s;
  work.recompute_s += rerun * more_rows_s;
}

}  // namespace rematlab::layout
