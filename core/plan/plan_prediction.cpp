#include "plan/plan_prediction.h"

#include <algorithm>
#include <stdexcept>

namespace rematlab::plan {
namespace {

// Memory at each moment is what earlier stages hold plus what the moment itself needs; the
// peak is the largest such sum.
struct PeakTracker {
  int64_t peak = 0;
  void at(int64_t bytes) { peak = std::max(peak, bytes); }
};

}  // namespace

double recompute_ms(const StageCost& stage, bool last_of_segment) {
  if (!last_of_segment) return stage.forward_ms;
  // A hand-edited profile's tail is held to the forward it is part of.
  return stage.forward_ms - std::clamp(stage.early_stop_saving_ms, 0.0, stage.forward_ms);
}

PlanPrediction predict_plan(const ChainCosts& costs, const CheckpointPlan& plan) {
  const auto& stages = costs.stages;
  const int64_t count = static_cast<int64_t>(stages.size());
  if (plan.segments.empty() || plan.segments.front().begin != 0 ||
      plan.segments.back().end != count) {
    throw std::invalid_argument("the plan does not cover the chain's stages");
  }
  PlanPrediction prediction;
  PeakTracker peak;
  // held_before[s]: what the stages before segment s hold once the forward is past them.
  std::vector<int64_t> held_before;
  int64_t held = costs.input_bytes;
  for (const Segment& segment : plan.segments) {
    held_before.push_back(held);
    int64_t input = 0;  // a recomputed segment's interior input, alive until the next stage ends
    for (int64_t i = segment.begin; i < segment.end; ++i) {
      const StageCost& stage = stages[i];
      prediction.step_ms += stage.forward_ms + stage.backward_ms;
      if (segment.recompute) {
        prediction.recompute_ms += recompute_ms(stage, i + 1 == segment.end);
        peak.at(held + input + stage.output_bytes + stage.forward_transient_bytes);
        input = i + 1 < segment.end ? stage.output_bytes : 0;
      } else {
        peak.at(held + stage.kept_bytes + stage.forward_transient_bytes);
        held += stage.kept_bytes;
      }
    }
    if (segment.recompute) held += stages[segment.end - 1].output_bytes;
  }
  prediction.held_bytes = held;
  peak.at(held + costs.head_peak_bytes);
  // Backward, last segment first: a segment's stages free what they hold as their backward ends.
  for (std::size_t s = plan.segments.size(); s-- > 0;) {
    const Segment& segment = plan.segments[s];
    int64_t interior = 0;  // what the recomputation rebuilt and backward has not yet freed
    if (segment.recompute) {
      const int64_t incoming = stages[segment.end - 1].output_bytes;  // the gradient
      for (int64_t i = segment.begin; i < segment.end; ++i) {
        const StageCost& stage = stages[i];
        peak.at(held_before[s] + interior + stage.kept_bytes + stage.forward_transient_bytes +
                incoming);
        interior += stage.kept_bytes;
      }
    } else {
      for (int64_t i = segment.begin; i < segment.end; ++i) interior += stages[i].kept_bytes;
    }
    for (int64_t i = segment.end; i-- > segment.begin;) {
      peak.at(held_before[s] + interior + stages[i].backward_transient_bytes);
      interior -= stages[i].kept_bytes;
    }
  }
  peak.at(costs.input_bytes + costs.embedding_backward_peak_bytes);
  prediction.step_ms += prediction.recompute_ms + costs.fixed_ms;
  prediction.peak_bytes = peak.peak;
  return prediction;
}

}  // namespace rematlab::plan
