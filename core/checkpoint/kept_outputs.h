// Operation-level save policies (`keep:LIST`): the outputs of chosen projections are saved in a
// checkpointed segment's forward and put back in its recomputation, where they re-enter the graph
// through a node whose backward is the projection's own (linear_backward.h). The matmuls are not
// run again; norms, activations and the attention core are.
#pragma once

#include <torch/torch.h>

#include <deque>
#include <map>
#include <optional>
#include <utility>

#include "checkpoint/checkpoint_policy.h"
#include "checkpoint/quantised_weight.h"

namespace rematlab {

// The outputs one recomputed segment keeps, in the order its forward produced them.
struct KeptTensors {
  std::deque<torch::Tensor> tensors;
};

// linear(input, weight, bias) — or, inside a checkpointed segment whose plan keeps `which`, the
// same output saved in the forward (recorded) and handed back in the recomputation (replayed).
// Every projection of the models runs here (`which` empty: one no policy keeps). With `quantised`
// (a frozen base stored in fewer bits) `weight` only names the projection: the values are
// `quantised`'s, dequantised where the multiply runs.
torch::Tensor projection(std::optional<KeptOutput> which, const torch::Tensor& input,
                         const torch::Tensor& weight, const torch::Tensor& bias,
                         const QuantisedWeightPtr& quantised = nullptr);

// Whether projection(which, …) would record or replay its output here (inside a checkpointed
// segment whose plan keeps `which`).
bool projection_is_kept(std::optional<KeptOutput> which);

// Tests only: while one exists, every projection projection() really runs records its weight and
// whether grad mode was on (off: a checkpointed segment's forward; on: a recomputation or a plain
// forward). One handed back from a keep, or skipped by an early stop, is not run.
class ProjectionLog {
 public:
  ProjectionLog();
  ~ProjectionLog();
  ProjectionLog(const ProjectionLog&) = delete;
  ProjectionLog& operator=(const ProjectionLog&) = delete;
  int count(const torch::Tensor& weight, bool grad_mode) const;
  static void record(const torch::Tensor& weight);

 private:
  std::map<std::pair<const void*, bool>, int> runs_;
};

// While it exists, projection() on this thread records into `store` (a segment's forward) or
// replays from it (its recomputation, which runs on the thread that runs its backward). The
// previous scope comes back on exit, so a nested segment without keeping is left alone.
class ScopedKeeping {
 public:
  enum class Mode { kRecord, kReplay };
  ScopedKeeping(const KeptOutputs& keep, KeptTensors* store, Mode mode);
  ~ScopedKeeping();
  ScopedKeeping(const ScopedKeeping&) = delete;
  ScopedKeeping& operator=(const ScopedKeeping&) = delete;

  bool keeps(KeptOutput which) const { return keep_.has(which); }

 private:
  friend torch::Tensor projection(std::optional<KeptOutput>, const torch::Tensor&,
                                  const torch::Tensor&, const torch::Tensor&,
                                  const QuantisedWeightPtr&);
  KeptOutputs keep_;
  KeptTensors* store_;
  Mode mode_;
  const ScopedKeeping* previous_;
};

}  // namespace rematlab
