// The layout planner's model of one layout: memory per GPU by part, stage by stage, and the
// step's time by what it is spent on. docs/layout.md writes the model out.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "checkpoint/checkpoint_policy.h"
#include "estimate/flops.h"
#include "layout/elementwise_work.h"
#include "layout/layout.h"

namespace rematlab::layout {

class LayoutEvaluator {
 public:
  // `request` must outlive the evaluator; validate(request) first.
  explicit LayoutEvaluator(const LayoutRequest& request);

  // The figures of a layout that structural_problem() accepts, each stage under its policy in
  // layout.stage_checkpoints (stage_policies.h) where given. Stages without one get the fastest
  // that fits their memory among none, selective and every:K for K = 1, 2, 4, … up to their
  // chunk (every:1 is Megatron-LM's full recomputation; a larger K keeps fewer inputs and
  // recomputes as much); the smallest when none fits, and then the layout does not fit.
  // Without `detail` the stages and their policies are left out (the search's pass over every
  // layout); the figures are the same.
  LayoutEvaluation evaluate(const Layout& layout, bool detail = true);

 private:
  struct ChunkActivations {
    int64_t saved = 0;      // kept per micro-batch once its forward is done
    int64_t peak = 0;       // the highest point of one micro-batch's forward and backward
    int64_t offloaded = 0;  // per micro-batch, in host memory (activation offload)
  };
  // One pipeline rank as the evaluator sees it.
  struct Stage {
    int64_t layers = 0;           // blocks on this rank, all chunks
    std::vector<int64_t> chunks;  // blocks of each of its model chunks
    int64_t chunk_layers = 0;     // the largest chunk's
    bool embedding = false;
    bool head = false;
    int64_t in_flight = 0;  // micro-batch chunks it holds at its peak
    int64_t rank = 0, pipeline_stages = 1, micro_batches = 1;  // its place in the schedule
    int64_t parameters = 0;            // this rank's share of the model's parameters
    int64_t layer_parameters = 0;      // one block's (one tensor rank's part)
    int64_t attention_parameters = 0;  // of them, its attention sublayer's
    int64_t expert_parameters = 0;     // of `parameters`, its experts' (its expert rank's share)
    // Of them, what trains (all, or a fine-tuned model's adapters), and a frozen base's bytes as
    // stored (fine-tuning's; zero in full training).
    int64_t trained = 0;
    int64_t frozen_bytes = 0;
  };

  // A stage under one policy with one micro-batch chunk in flight, and what each more adds.
  struct StageCost {
    double rerun = 0.0;  // StageWork's, as its chunks' shares
    std::vector<double> forward_share, backward_share;
    StageFigures at_one;
    int64_t host_at_one = 0;
    TimeParts time;  // one micro-batch's
    // Each more held: what a micro-batch keeps of each of the stage's chunks, in its order (the
    // largest's is also in at_one, which holds it running).
    std::vector<int64_t> saved_by_chunk;
    std::vector<int64_t> offloaded_by_chunk;
    // Under policies of the chunks' own: what each chunk's backward rises above what it saved
    // (empty otherwise).
    std::vector<int64_t> rise_by_chunk;
  };

  // Policies are numbers here, which the caches compare quickly: 0 none, -1 selective, K
  // every:K; any other given (sublayer strides, a segment list, a rank's chunks' own policies
  // joined by '/') one of -2, -3, …, as the evaluator meets them (layout_policies.cpp).
  static constexpr int64_t kNonePolicy = 0;
  static constexpr int64_t kSelectivePolicy = -1;
  static constexpr int64_t kFirstNamedPolicy = -2;  // named_policies_[0]
  int64_t policy_code(const std::string& text);
  std::string policy_text(int64_t code) const;
  bool per_chunk(int64_t policy) const;  // a rank's chunks' own policies
  // The policy of the stage's `chunk` (its own, or the stage's for all).
  int64_t chunk_policy(int64_t policy, size_t chunk) const;
  // The share of the stage's blocks' forward a policy runs again: every:K all of it, none and
  // selective none (selective's attention core is in the FLOPs), a segment list its sublayers'.
  double rerun_share(int64_t policy, const Stage& stage);
  const CheckpointPlan& plan(int64_t policy, int64_t layers);
  ChunkActivations chunk_activations(const Layout& layout, int64_t chunk_layers, int64_t policy,
                                     bool embedding, bool head);
  // One tensor rank's FLOPs of one micro-batch through a chunk (the head's only when it has it;
  // without the embedding its input's gradient is formed, as a frozen base's first chunk does not).
  estimate::StepFlops chunk_flops(const Layout& layout, int64_t chunk_layers, int64_t policy,
                                  bool embedding, bool head);
  // What a stage's policy costs whatever the ZeRO stage and the model states' offload.
  struct StageWork {
    ChunkActivations own;    // the chunk with the embedding or head, if the rank has one
    ChunkActivations plain;  // any other chunk
    double compute_s = 0.0, recompute_s = 0.0, elementwise_s = 0.0, tensor_s = 0.0, experts_s = 0.0,
           context_s = 0.0, pipeline_s = 0.0;
    double rerun = 0.0;  // rerun_share()
    // Of the micro-batch's time, each chunk's forward and backward (by their FLOPs), for the
    // schedule's walk.
    std::vector<double> forward_share, backward_share;
  };
  StageWork make_stage_work(const Layout& layout, const Stage& stage, int64_t policy);
  // One micro-batch's FLOPs through the stage's chunks; each chunk's forward and backward shares
  // into `work`.
  estimate::StepFlops stage_flops(const Layout& layout, const Stage& stage, int64_t policy,
                                  StageWork& work);
  // StageWork's own and plain chunks.
  void set_chunk_activations(const Layout& layout, const Stage& stage, int64_t policy,
                             StageWork& work);
  // Expert parallelism's all-to-alls for `layers` blocks of `tokens` tokens each, and the extra
  // rows the fullest expert rank runs (at matmul `speed`), into `work`.
  void add_expert_exchange(const Layout& layout, double tokens, double layers, double rerun,
                           double speed, StageWork& work) const;
  const StageWork& stage_work(const Layout& layout, const Stage& stage, int64_t policy);
  int64_t buffer_bytes(const Layout& layout, const Stage& stage) const;
  static int64_t largest_chunk_trained(const Stage& stage);
  int64_t first_gradients_parameter(const Layout& layout, const Stage& stage) const;
  // Whether the request plans RematLab's engine on Gloo: it runs Gloo on the CPU, the one device
  // whose computing cores run the collectives too (nothing hides them: --no-overlap).
  bool engine_gloo() const {
    return request_.engine_only && !request_.cluster.gpu.overlaps_communication;
  }
  // ZeRO-3's gathers and activation offload's transfers left exposed in one micro-batch, into
  // time.data and time.offload; returns their sum.
  double exposed_transfers(const Layout& layout, const Stage& stage, int64_t policy,
                           const StageWork& work, TimeParts& time) const;
  StageCost stage_cost(const Layout& layout, const Stage& stage, int64_t policy);

  // The blocks of each model chunk in chain order (layout_split.cpp): --pp-split's list, balanced
  // by their predicted times under --pp-split balanced, else the engine's rule.
  std::vector<int64_t> chain_split(const Layout& layout);
  // The pipeline ranks' parts of the model (layout.split's chunks).
  std::vector<Stage> stages_of(const Layout& layout) const;
  // The fastest policy that fits holding what `stage` holds in flight; the smallest when none
  // does.
  const StageCost& choose_policy(const std::vector<StageCost>& costs, const Stage& stage) const;
  struct Placed {
    double slowest = 0.0;  // the slowest stage's micro-batch
    TimeParts slowest_time;
    // Each stage's chunks' forward and backward of one micro-batch (pipelines only).
    std::vector<std::vector<double>> forward, backward;
    int64_t most_trained = 0;          // the largest stage's parameters that train
    int64_t most_trained_experts = 0;  // of them, its experts'
  };
  // Chooses each stage's policy into `result` (memory, host bytes, stages when `detail`).
  Placed place_stages(const Layout& layout, bool detail, LayoutEvaluation& result);
  // The step's time, tokens/s and MFU.
  void finish_step(const Layout& layout, const Placed& placed, LayoutEvaluation& result) const;
  // A pipeline's micro-batches through its stages' orders (PipelineSchedule::walked_step_seconds).
  double walked_step(const Layout& layout, const Placed& placed) const;
  StageFigures in_flight(const StageCost& cost, const Stage& stage, int64_t& host_bytes) const;
  int64_t total_in_flight(const StageCost& cost, const Stage& stage) const;  // in_flight's total
  // The stage's activations at its peak: at_one's and the chunk passes held beyond it, or, for
  // chunks under policies of their own, the schedule walked with each backward's rise.
  int64_t activations_held(const StageCost& cost, const Stage& stage) const;
  // What the chunk passes `stage` holds at most keep (each chunk's `by_chunk`, as its schedule
  // holds them), beyond the largest chunk's, which at_one counts. An interleaved schedule's
  // walk is kept for the layouts that differ only in ZeRO and offload (held_cache_: like the
  // other caches, one evaluator serves one thread; each search builds its own).
  int64_t held_beyond_one(const Stage& stage, const std::vector<int64_t>& by_chunk) const;

  const LayoutRequest& request_;
  const ElementwiseValues elementwise_;      // one block's, per token
  std::vector<std::string> named_policies_;  // policy -2 - i is named_policies_[i]
  std::map<std::string, int64_t> named_codes_;
  std::map<int64_t, std::vector<int64_t>> chunk_codes_;  // a per-chunk policy's, by chunk
  std::map<std::pair<int64_t, int64_t>, CheckpointPlan> plan_cache_;
  using Key =
      std::tuple<int64_t, bool, int64_t, int64_t, int64_t, int64_t, bool, bool, bool, int64_t>;
  std::map<Key, ChunkActivations> activation_cache_;
  using FlopsKey = std::tuple<int64_t, bool, int64_t, int64_t, int64_t, bool, bool>;
  std::map<FlopsKey, estimate::StepFlops> flops_cache_;
  // Kept while the degrees, micro-batch and activation offload stay the same.
  using WorkLayout =
      std::tuple<int64_t, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;
  WorkLayout work_layout_{};
  using WorkKey = std::tuple<std::vector<int64_t>, bool, bool, int64_t>;
  std::map<WorkKey, StageWork> work_cache_;
  using HeldKey = std::tuple<int64_t, int64_t, int64_t, std::vector<int64_t>>;
  mutable std::map<HeldKey, int64_t> held_cache_;  // cleared with work_cache_
  // peak_with_backward's walks, by HeldKey and the chunks' rises.
  mutable std::map<std::pair<HeldKey, std::vector<int64_t>>, int64_t> peak_cache_;
  // walked_step's, by micro-batches and the passes' times.
  using PassTimes = std::vector<std::vector<double>>;
  mutable std::map<std::tuple<int64_t, PassTimes, PassTimes>, double> walk_cache_;
  // Balanced splits by chunks and what a block's and the head's times depend on: tensor ranks,
  // sequence parallelism, context and expert ranks, micro-batch.
  using SplitKey = std::tuple<int64_t, int64_t, bool, int64_t, int64_t, int64_t>;
  std::map<SplitKey, std::vector<int64_t>> split_cache_;
};

}  // namespace rematlab::layout
