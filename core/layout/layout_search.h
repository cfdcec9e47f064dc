// The layout planner's search: every layout the request leaves open, evaluated; the fastest that
// fit, the memory/time frontier, and the nearest ones that do not fit, with what they lack.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "layout/layout.h"

namespace rematlab::layout {

// One evaluated layout, small enough to keep for every one the search tries (the Scale tab
// draws them all): its degrees and its two figures.
struct LayoutPoint {
  Layout layout;  // stage_checkpoints as fixed, else empty: evaluate() chooses them again
  int64_t memory_bytes = 0;  // the most any stage needs
  double step_s = 0.0;
  bool fits = false;
  bool device_fits = false;
};

struct LayoutAnswer {
  std::vector<LayoutEvaluation> best;      // fitting, fastest first, at most request.top
  std::vector<LayoutEvaluation> frontier;  // fitting; none is both smaller and faster; by memory
  std::vector<LayoutEvaluation> nearest;   // not fitting, the least over the GPU's memory first
  std::vector<LayoutEvaluation>
      nearest_without_offload;  // the same, among those offloading nothing
  // The fastest layout that fits the GPUs and would fit with more host memory per node, when
  // nothing fits or it would be faster than what does.
  std::vector<LayoutEvaluation> with_more_host;
  std::vector<LayoutPoint> points;  // every layout evaluated
  int64_t impossible = 0;           // combinations that break a rule (layout_rules.h)
  double search_s = 0.0;
};

// What search_layouts throws once `cancel` is set: the answer is dropped.
struct SearchCancelled {};

// Throws InvalidInput when the request is bad, or when no combination it allows can be built
// (naming the rule the fixed degrees break). `cancel`, when given, is read between layouts.
LayoutAnswer search_layouts(const LayoutRequest& request,
                            const std::atomic<bool>* cancel = nullptr);

}  // namespace rematlab::layout
