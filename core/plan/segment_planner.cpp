#include "plan/segment_planner.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace rematlab::plan {
namespace {

constexpr double kUnreachable = std::numeric_limits<double>::infinity();

// How the best way to reach a state came about: from slot `from_slot` of the stage where the
// last segment began, keeping that stage or recomputing [begin, end).
struct Choice {
  int64_t begin = -1;
  int from_slot = -1;
  bool recompute = false;
};

class Planner {
 public:
  Planner(const ChainCosts& costs, int64_t budget, int slots)
      : costs_(costs),
        stages_(static_cast<int64_t>(costs.stages.size())),
        budget_(budget),
        slots_(slots),
        unit_(std::max<int64_t>(1, (budget + slots - 1) / slots)) {}

  std::optional<CheckpointPlan> solve() {
    const int width = slots_ + 1;
    best_.assign((stages_ + 1) * width, kUnreachable);
    held_.assign((stages_ + 1) * width, 0);
    choice_.assign((stages_ + 1) * width, Choice{});
    reach(0, costs_.input_bytes, 0.0, Choice{});
    for (int64_t i = 0; i < stages_; ++i) {
      for (int slot = 0; slot <= slots_; ++slot) {
        const double time = best_[i * width + slot];
        if (time == kUnreachable) continue;
        const int64_t held = held_[i * width + slot];
        try_keep(i, slot, held, time);
        for (int64_t end = i + 1; end <= stages_; ++end) try_recompute(i, end, slot, held, time);
      }
    }
    int end_slot = -1;
    for (int slot = 0; slot <= slots_; ++slot) {
      const double time = best_[stages_ * width + slot];
      if (time == kUnreachable) continue;
      if (held_[stages_ * width + slot] + costs_.head_peak_bytes > budget_) continue;
      if (end_slot < 0 || time < best_[stages_ * width + end_slot]) end_slot = slot;
    }
    if (end_slot < 0) return std::nullopt;
    if (costs_.input_bytes + costs_.embedding_backward_peak_bytes > budget_) {
      return std::nullopt;  // no plan changes it
    }
    return rebuild(end_slot);
  }

 private:
  int slot_of(int64_t bytes) const {
    return static_cast<int>(std::min<int64_t>(slots_ + 1, bytes / unit_ + (bytes % unit_ != 0)));
  }

  // One state per slot: the fastest way found to hold that much (the least held among equally
  // fast ones), with its exact bytes, so rounding never adds up along the chain.
  void reach(int64_t stage, int64_t held, double time, Choice how) {
    const int slot = slot_of(held);
    if (slot > slots_) return;
    const std::size_t at = stage * (slots_ + 1) + slot;
    if (time < best_[at] || (time == best_[at] && held < held_[at])) {
      best_[at] = time;
      held_[at] = held;
      choice_[at] = how;
    }
  }

  void try_keep(int64_t i, int slot, int64_t held, double time) {
    const StageCost& stage = costs_.stages[i];
    const int64_t kept = held + stage.kept_bytes;
    if (kept + stage.forward_transient_bytes > budget_) return;
    if (kept + stage.backward_transient_bytes > budget_) return;
    reach(i + 1, kept, time, {i, slot, false});
  }

  // The same moments plan_prediction checks for a recomputed segment, above `held`.
  void try_recompute(int64_t begin, int64_t end, int slot, int64_t held, double time) {
    const auto& stages = costs_.stages;
    const int64_t gradient = stages[end - 1].output_bytes;
    int64_t input = 0;
    int64_t interior = 0;
    double rebuild_ms = 0.0;
    for (int64_t k = begin; k < end; ++k) {
      const StageCost& stage = stages[k];
      if (held + input + stage.output_bytes + stage.forward_transient_bytes > budget_) return;
      if (held + interior + stage.kept_bytes + stage.forward_transient_bytes + gradient > budget_)
        return;
      input = stage.output_bytes;
      interior += stage.kept_bytes;
      rebuild_ms += recompute_ms(stage, k + 1 == end);
    }
    for (int64_t k = end; k-- > begin;) {
      if (held + interior + stages[k].backward_transient_bytes > budget_) return;
      interior -= stages[k].kept_bytes;
    }
    reach(end, held + gradient, time + rebuild_ms, {begin, slot, true});
  }

  CheckpointPlan rebuild(int end_slot) const {
    std::vector<Segment> reversed;
    int64_t stage = stages_;
    int slot = end_slot;
    while (stage > 0) {
      const Choice& how = choice_[stage * (slots_ + 1) + slot];
      reversed.push_back({how.begin, stage, how.recompute});
      stage = how.begin;
      slot = how.from_slot;
    }
    CheckpointPlan plan;
    for (auto it = reversed.rbegin(); it != reversed.rend(); ++it) {
      // Kept stages in a row are one kept segment, as the policies write them.
      if (!it->recompute && !plan.segments.empty() && !plan.segments.back().recompute) {
        plan.segments.back().end = it->end;
      } else {
        plan.segments.push_back(*it);
      }
    }
    return plan;
  }

  const ChainCosts& costs_;
  const int64_t stages_;
  const int64_t budget_;
  const int slots_;
  const int64_t unit_;
  std::vector<double> best_;
  std::vector<int64_t> held_;
  std::vector<Choice> choice_;
};

}  // namespace

std::optional<PlannedChain> plan_under_budget(const ChainCosts& costs, int64_t budget_bytes,
                                              int slots) {
  if (costs.stages.empty() || budget_bytes <= 0 || slots < 1) return std::nullopt;
  std::optional<CheckpointPlan> plan = Planner(costs, budget_bytes, slots).solve();
  if (!plan) return std::nullopt;
  PlannedChain planned{*plan, predict_plan(costs, *plan)};
  return planned;
}

int64_t smallest_feasible_budget(const ChainCosts& costs, int slots) {
  // No plan fits below the chain's input and the head; feasibility grows with the budget.
  int64_t low = 0;  // known not to fit
  int64_t high = std::max<int64_t>(1, costs.input_bytes + costs.head_peak_bytes);
  while (!plan_under_budget(costs, high, slots)) {
    if (high > std::numeric_limits<int64_t>::max() / 4) return high;
    low = high;
    high *= 2;
  }
  while (high - low > std::max<int64_t>(1, high / 1000)) {
    const int64_t middle = low + (high - low) / 2;
    (plan_under_budget(costs, middle, slots) ? high : low) = middle;
  }
  return high;
}

}  // namespace rematlab::plan
