#include "estimate/activation_memory.h"

#include <algorithm>
#include <vector>

#include "estimate/engine_accounting.h"
#include "estimate/model_state.h"
#include "model/attention_window.h"

namespace rematlab::estimate {
namespace {

// Replays forward and backward under the plan, adding what each step keeps and freeing what
// autograd frees, and records the highest point.
class PeakReplay {
 public:
  void at(int64_t bytes, const std::string& phase) {
    if (bytes > peak_) {
      peak_ = bytes;
      phase_ = phase;
    }
  }
  int64_t peak() const { return peak_; }
  const std::string& phase() const { return phase_; }

 private:
  int64_t peak_ = 0;
  std::string phase_ = "forward";
};

std::string describe(const std::vector<SublayerCost>& costs, const Segment& segment) {
  std::string text = "[";
  for (int64_t i = segment.begin; i < segment.end; ++i) {
    text += (i > segment.begin ? " " : "") + costs[i].name;
  }
  return text + (segment.recompute ? "]*" : "]");
}

}  // namespace

int64_t literature_layer_bytes(const Architecture& arch, int64_t batch, Precision precision,
                               const TensorLayout& layout) {
  return literature_layer_bytes(arch, batch, precision, layout, LiteratureRecompute::kNone);
}

int64_t literature_layer_bytes(const Architecture& arch, int64_t batch, Precision precision,
                               const TensorLayout& layout, LiteratureRecompute recompute) {
  const double s = static_cast<double>(arch.seq_len);
  const double b = static_cast<double>(batch);
  const double h = static_cast<double>(arch.d_model);
  const double a = static_cast<double>(arch.heads);
  const double t = static_cast<double>(layout.tp);
  const bool dropout = arch.dropout > 0.0;
  const bool fp32 = precision == Precision::kFp32;
  // 16-bit: attention 11·sbh (QKV input 2, Q and K 4, V 2, projection input 2, mask 1),
  // MLP 19·sbh (input 2, GELU input 8, GELU output 8, mask 1), two LayerNorm inputs 4·sbh;
  // scores: softmax output 2·as²b, its dropout mask as²b and dropped copy 2·as²b.
  const double wide = fp32 ? 2.0 : 1.0;      // 2-byte tensors become 4-byte ones
  const double masks = dropout ? 2.0 : 0.0;  // two 1-byte masks per layer
  const double per_sbh = (34.0 - 2.0) * wide + masks;
  const double score_terms = (dropout ? 2.0 + 2.0 : 2.0) * wide + (dropout ? 1.0 : 0.0);
  // Split over t ranks without sequence parallelism (their Table 2), the norms' inputs, the two
  // column-parallel layers' inputs and the masks after the row-parallel ones stay whole: 10·sbh
  // of the 34; with it, every term divides.
  const double whole = layout.split() && !layout.sequence_parallel ? 8.0 * wide + masks : 0.0;
  if (recompute == LiteratureRecompute::kFull) {
    return static_cast<int64_t>(s * b * h * 2.0 * wide / (layout.sequence_parallel ? t : 1.0));
  }
  double bytes = s * b * h * (whole + (per_sbh - whole) / t);
  const bool scores_kept =
      arch.attention == AttentionKind::kMath && recompute == LiteratureRecompute::kNone;
  // A sliding window keeps its blocks' scores (model/attention_window.h), not s².
  const double score_values =
      static_cast<double>(attention_score_values(arch.seq_len, arch.sliding_window));
  if (scores_kept) bytes += score_terms * a * score_values * b / t;
  return static_cast<int64_t>(bytes);
}

namespace {

// One training step's activations replayed in the order the engine makes and frees them:
// forward segment by segment, the loss, backward from the last segment, the optimizer step.
class StepReplay {
 public:
  explicit StepReplay(const ActivationInput& input)
      : input_(input),
        engine_(input.arch, input.batch, input.precision, input.plan.recompute_attention_core,
                input.plan.keep, input.layout),
        segments_(input.plan.segments),
        count_(static_cast<int64_t>(segments_.size())),
        residual_(engine_.residual_gradient()) {
    for (int64_t block = 0; block < input.arch.layers; ++block) {
      costs_.push_back(engine_.attention(block));
      costs_.push_back(engine_.mlp(block));
    }
    busiest_costs_ = costs_;
    // Under expert parallelism the step's rank load is a mean over blocks; a block rebuilt alone
    // holds its own rows, the busiest block's at worst.
    if (input.arch.moe.enabled() && input.arch.busiest_block_load() > input.arch.expert_rank_load) {
      Architecture busiest = input.arch;
      busiest.expert_rank_load = input.arch.busiest_block_load();
      const EngineAccounting engine(busiest, input.batch, input.precision,
                                    input.plan.recompute_attention_core, input.plan.keep,
                                    input.layout);
      for (int64_t block = 0; block < input.arch.layers; ++block) {
        busiest_costs_[2 * block + 1] = engine.mlp(block);
      }
    }
    output_dropped_.assign(costs_.size(), false);
  }

  // Forward. A kept segment keeps every sublayer's interior and output; a recomputed one runs
  // without autograd and keeps only its output, which is the next segment's input. Returns
  // what is saved for backward.
  int64_t forward() {
    live_ = engine_.embedding_output();
    for (int64_t j = 0; j < count_; ++j) {
      const Segment& segment = segments_[j];
      if (!segment.recompute) {
        for (int64_t i = segment.begin; i < segment.end; ++i) {
          replay_.at(live_ + costs_[i].interior + costs_[i].output + costs_[i].forward_extra,
                     "forward");
          live_ += costs_[i].interior + costs_[i].output;
          if (costs_[i].input_dropped) drop_input_of(i);
        }
        continue;
      }
      // Without autograd a sublayer's tensors live only while it runs, beside what the
      // sublayers before it in the segment kept (its own kept output is among its tensors).
      int64_t busiest = 0;
      int64_t kept_before = 0;
      for (int64_t i = segment.begin; i < segment.end; ++i) {
        const SublayerCost& cost = busiest_costs_[i];  // any of its blocks may be the busiest
        busiest = std::max(busiest, kept_before + cost.interior + cost.forward_extra + cost.output);
        kept_before += costs_[i].kept;
      }
      replay_.at(live_ + busiest + residual_, "forward");
      live_ += costs_[segment.end - 1].output + kept(segment) + kReplayStateBytes;
      if (input_offloaded(j)) live_ -= residual_;
    }
    if (!input_.head) return live_;
    replay_.at(live_ + engine_.loss_saved() + engine_.loss_forward_extra(), "loss");
    live_ += engine_.loss_saved();
    return live_;
  }

  // Backward, last segment first; a residual-stream gradient is live throughout. Then the
  // update, whose temporaries come alone: every activation is gone by then.
  void backward() {
    if (input_.head) {
      replay_.at(live_ + engine_.loss_backward_extra(), "loss backward");
      live_ -= engine_.loss_saved();
      if (input_.embedding) live_ += engine_.held_head_gradient();
    }
    for (int64_t j = count_ - 1; j >= 0; --j) backward_segment(j);
    if (input_.optimizer == Optimizer::kAdamW) {
      replay_.at(2 * engine_.largest_trained_parameter() * 4, "optimizer step");  // fp32
    }
  }

  const PeakReplay& replay() const { return replay_; }

 private:
  void backward_segment(int64_t j) {
    const Segment& segment = segments_[j];
    const std::string phase = "backward of " + describe(costs_, segment);
    int64_t prefetch = 0;
    int64_t gradients = residual_;
    if (segment.recompute) {
      // The forward's copy of the output is done with once its consumer's backward ran.
      if (!(j + 1 < count_ && input_offloaded(j + 1)) && !output_dropped_[segment.end - 1]) {
        live_ -= costs_[segment.end - 1].output;
      }
      if (input_offloaded(j)) live_ += residual_;                 // fetched back
      if (j > 0 && input_offloaded(j - 1)) prefetch = residual_;  // read one ahead
      // The recomputation stops before the last sublayer's output projection and residual add:
      // that output is never rebuilt, except under sequence parallelism, where the tail's
      // backward needs its scatter's conjugate, and after a mixture of experts: then the tail
      // runs whole.
      // Kept outputs re-enter the rebuilt interior; those it does not hold (the attention's
      // projection output, the QKV tensor beside the explicit core's copies) are freed.
      live_ += saved(segment) + rebuilt_extra(segment) - kept(segment) -
               (runs_tail_whole(segment.end - 1) ? 0 : costs_[segment.end - 1].output);
      // The segment's input is the recomputation's own; a stream inside it may be dropped.
      for (int64_t i = segment.begin + 1; i < segment.end; ++i) {
        if (costs_[i].input_dropped) drop_input_of(i);
      }
      gradients = 2 * residual_;  // the segment's output gradient and the inner one
    }
    for (int64_t i = segment.end - 1; i >= segment.begin; --i) {
      // A sublayer's output is freed by its consumer's backward before its own begins.
      const bool early_stopped = segment.recompute && i == segment.end - 1 && !runs_tail_whole(i);
      if (!early_stopped && !output_dropped_[i]) live_ -= costs_[i].output;
      // An early-stopped tail's backward starts from the segment's output gradient itself (its
      // residual add hands it on as it is); an inner one is made where the branch rejoins.
      const int64_t held = early_stopped ? residual_ : gradients;
      // Its transients as the busiest block's (any block may be the one); what it holds as
      // kept or rebuilt.
      const SublayerCost& cost = segment.recompute ? rebuilt(i, segment) : costs_[i];
      replay_.at(live_ + held + busiest_costs_[i].backward_extra + prefetch, phase);
      live_ -= cost.interior + (segment.recompute ? cost.rebuilt_extra : 0);
    }
    if (input_offloaded(j)) live_ -= residual_;
    if (segment.recompute) live_ -= kReplayStateBytes;
  }

  // Sublayer i is done with the residual stream it was handed and nothing kept it.
  void drop_input_of(int64_t i) {
    if (i == 0) {
      live_ -= engine_.embedding_output();
      return;
    }
    live_ -= costs_[i - 1].output;
    output_dropped_[i - 1] = true;
  }

  // What a recomputed segment keeps besides its input; never its last sublayer's tail output
  // (early stop never runs that projection again, so nothing of it is kept).
  int64_t kept(const Segment& segment) const {
    int64_t bytes = 0;
    for (int64_t i = segment.begin; i < segment.end; ++i) bytes += costs_[i].kept;
    return bytes - costs_[segment.end - 1].kept_tail;
  }
  int64_t rebuilt_extra(const Segment& segment) const {
    int64_t bytes = 0;
    for (int64_t i = segment.begin; i < segment.end; ++i)
      bytes += rebuilt(i, segment).rebuilt_extra;
    return bytes;
  }
  int64_t saved(const Segment& segment) const {
    int64_t bytes = 0;
    for (int64_t i = segment.begin; i < segment.end; ++i) {
      bytes += rebuilt(i, segment).interior + rebuilt(i, segment).output;
    }
    return bytes;
  }
  // Sublayer i as a recomputation rebuilds it: the segment's first experts (odd sublayers) at
  // the busiest block's load, held longest of its blocks; the others at the step's mean.
  const SublayerCost& rebuilt(int64_t i, const Segment& segment) const {
    const int64_t first_experts = segment.begin | 1;
    return i == first_experts ? busiest_costs_[i] : costs_[i];
  }
  // Sublayer i's recomputation runs its tail (a mixture of experts has no one projection to stop
  // before; under sequence parallelism none stops).
  bool runs_tail_whole(int64_t i) const {
    return input_.layout.sequence_parallel || costs_[i].tail_whole;
  }
  // Offloaded: a recomputed segment's input leaves the device after its forward.
  bool input_offloaded(int64_t j) const { return input_.offload && segments_[j].recompute; }

  const ActivationInput& input_;
  const EngineAccounting engine_;
  const std::vector<Segment>& segments_;
  const int64_t count_;
  const int64_t residual_;  // every segment boundary is this size
  std::vector<SublayerCost> costs_;
  std::vector<SublayerCost> busiest_costs_;  // costs_ with each block's experts at the busiest load
  std::vector<bool> output_dropped_;         // by its consumer, whose input wanted no gradient
  PeakReplay replay_;
  int64_t live_ = 0;
};

}  // namespace

ActivationEstimate estimate_activations(const ActivationInput& input) {
  validate(input.arch, input.layout);  // a width divided by tp must be one
  StepReplay step(input);
  ActivationEstimate estimate;
  estimate.saved_bytes = step.forward();
  step.backward();
  estimate.peak_bytes = step.replay().peak();
  estimate.peak_phase = step.replay().phase();
  estimate.literature_layer_bytes =
      literature_layer_bytes(input.arch, input.batch, input.precision, input.layout);
  estimate.literature_bytes = estimate.literature_layer_bytes * input.arch.layers;
  return estimate;
}

int64_t best_interval(const ActivationInput& input, int64_t* best_peak_bytes) {
  int64_t best_k = 1;
  int64_t best = -1;
  for (int64_t k = 1; k <= input.arch.layers; ++k) {
    ActivationInput trial = input;
    trial.plan =
        CheckpointPolicy::parse("every:" + std::to_string(k)).plan_for(input.arch.layers, 0.0);
    const int64_t peak = estimate_activations(trial).peak_bytes;
    if (best < 0 || peak < best) {
      best = peak;
      best_k = k;
    }
  }
  if (best_peak_bytes) *best_peak_bytes = best;
  return best_k;
}

}  // namespace rematlab::estimate
