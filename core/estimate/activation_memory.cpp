#include "estimate/activation_memory.h"

#include <algorithm>
#include <vector>

#include "estimate/model_state.h"

namespace rematlab::estimate {
namespace {

// What each recomputation keeps to replay its forward's random numbers: the CPU generator's state
// (on a GPU it is host memory, counted all the same: a few KiB a segment).
constexpr int64_t kReplayStateBytes = 5056;

// What one sublayer costs, in bytes, for the whole micro-batch.
struct SublayerCost {
  std::string name;            // a0, m0, … as CheckpointPlan::describe() writes them
  int64_t interior = 0;        // kept for backward when it runs under autograd, output excluded
  int64_t output = 0;          // the residual stream it hands on
  int64_t forward_extra = 0;   // briefly live on top of `interior` while it runs
  int64_t backward_extra = 0;  // live on top of what is saved while its backward runs
  int64_t kept = 0;            // saved in a recomputed segment's forward by a keep: policy
  int64_t kept_tail = 0;       // of `kept`: its output projection's, never kept at a segment end
  // In a recomputation, held on top of `interior`: under sequence parallelism a kept projection
  // re-enters the graph on its input gathered whole rather than the rank's slice.
  int64_t rebuilt_extra = 0;
};

// The engine's saved tensors, per token, counted from what each LibTorch op keeps for backward
// (see docs/estimates.md for the list). `v` is bytes per activation value.
class EngineAccounting {
 public:
  EngineAccounting(const Architecture& arch, int64_t batch, Precision precision, bool selective,
                   const KeptOutputs& keep, const TensorLayout& layout)
      : arch_(arch),
        batch_(batch),
        tokens_(batch * arch.seq_len),
        v_(bytes_per_value(precision)),
        selective_(selective),
        keep_(keep),
        tp_(layout.tp),
        local_tokens_(layout.sequence_parallel ? tokens_ / layout.tp : tokens_) {}

  // Under tensor parallelism (docs/parallel.md) a rank holds 1/T of the heads: dq is its query
  // and context width, its QKV tensor dq plus the key/value width it projects.
  SublayerCost attention(int64_t block) const {
    const int64_t d = arch_.d_model;
    const int64_t dq = arch_.q_dim() / tp_;
    const int64_t qkv = dq + 2 * rank_kv_projected(arch_, tp_);
    const int64_t scores = arch_.heads / tp_ * arch_.seq_len;  // one s-row per head and token
    const bool math = arch_.attention == AttentionKind::kMath;
    SublayerCost cost;
    cost.name = "a" + std::to_string(block);
    cost.output = per_local(d);
    // The norm (its output is the QKV matmul's input) and the core's output (the output
    // projection's input). The fused core writes its output already in (b, s, a, hd) order, so
    // making it contiguous copies nothing.
    const int64_t outside_core = norm_bytes() + per_token(dq);
    // The core. Fused: q, k, v and the log-sum-exp. Without rotation v is a view of the QKV
    // tensor and keeps all of it alive; rotated q and k are new tensors, and v a compact copy, so
    // the QKV tensor goes (the rotation itself keeps only views of the cos/sin tables; a rank
    // sharing the key/value heads rotates and copies only the one it uses). Explicit: the scaled q,
    // contiguous copies of k and v (batched matmul's copies of strided heads, or the copies that
    // repeat shared K/V heads) and the softmax probabilities — the s×s term; the QKV tensor itself
    // is then freed.
    const int64_t kv_used = rank_kv_used(arch_, tp_);
    const int64_t rotated = arch_.rotary ? dq + kv_used : 0;
    const int64_t math_core = (qkv_kept() ? dq + qkv + (arch_.rotary ? dq : 0) : 3 * dq) + scores;
    // Rotated, the fused core keeps a compact copy of v instead of the QKV tensor it was a view of.
    const int64_t fused_input = arch_.rotary ? kv_used : qkv;
    const int64_t core = math ? math_core : fused_input + rotated + arch_.heads / tp_;
    // The explicit core's causal mask (s×s booleans, one per call), kept by the in-place fill's
    // backward.
    const int64_t mask = math ? arch_.seq_len * arch_.seq_len : 0;
    if (selective_) {
      cost.interior = outside_core + per_token(qkv) + kReplayStateBytes;
      // Backward first recomputes the core beside its kept input, then runs its backward. The
      // fused core's q, k and v are views of that input. The explicit core's are copies (a
      // single sequence's k and v fold as views of the kept input instead), and its
      // recomputed output, the inner backward's root, is a copy too (its heads made contiguous).
      const int64_t recomputed =
          math ? core - (qkv_kept() ? qkv : 0) + dq : core - (arch_.rotary ? 0 : qkv);
      cost.backward_extra = per_token(recomputed) + mask + backward_core(qkv, scores, math);
    } else {
      cost.interior = outside_core + per_token(core) + mask;
      cost.backward_extra = backward_core(qkv, scores, math);
    }
    // Before the core: the output projection's backward (its input's gradient and its weight's).
    cost.backward_extra =
        std::max(cost.backward_extra, per_token(dq) + weight(d * dq) + gathered_gradient());
    // The explicit core holds the raw scores and the probabilities at once; rotating q and k
    // briefly holds the rotated halves and both products.
    const int64_t busiest =
        math ? std::max(per_token(scores), tp_ > 1 ? tail_extra() : 0) : tail_extra();
    cost.forward_extra = busiest + per_token(arch_.rotary ? 2 * dq : 0);
    // keep: the QKV tensor and the output projection's output (the sum's operand).
    cost.kept_tail = keep_.attention_out ? per_token(d) : 0;
    cost.kept = (keep_.qkv ? per_token(qkv) : 0) + cost.kept_tail;
    cost.rebuilt_extra = keep_.qkv ? gathered_input_extra() : 0;
    return cost;
  }

  SublayerCost mlp(int64_t block) const {
    const int64_t d = arch_.d_model;
    const int64_t f = arch_.mlp_hidden / tp_;  // this rank's columns
    SublayerCost cost;
    cost.name = "m" + std::to_string(block);
    cost.output = per_local(d);
    // The norm; GELU: the up projection's output (GELU's input) and GELU's output (the down
    // projection's input). SwiGLU: the fused gate-and-up output (2f, kept whole by its halves'
    // views), SiLU(gate) and the product.
    cost.interior = norm_bytes() + per_token((arch_.gated_mlp ? 4 : 2) * f);
    cost.forward_extra = tail_extra();
    // GELU: the down projection's input gradient (f wide) appears before its saved input is
    // freed, with one weight gradient before it is added into .grad. SwiGLU: the product's
    // gradient and those of both its factors meet once the product itself is freed.
    // The down projection's backward (its input's gradient beside its weight's) comes first.
    // SwiGLU's product then swaps itself for its gradient and its two factors' gradients meet;
    // its fused gate-and-up weight gradient appears only once the two factors and their
    // gradients are freed.
    const int64_t down = per_token(f) + weight(d * f) + gathered_gradient();
    cost.backward_extra = arch_.gated_mlp
                              ? std::max({down, per_token(2 * f),
                                          weight(2 * d * f) + per_token(d) - per_token(2 * f)})
                              : down;
    // Under sequence parallelism the up projection's backward gathers its input again (freed
    // once the weight's gradient is formed), and sums and scatters its input's gradient: three
    // s·d tensors (the whole input or, on Gloo, whose reduce-scatter is an all-to-all, the
    // slices it received; the gradient; its slices laid out rank by rank for the collective) and
    // the slice kept, beside its weight's gradient and its output's gradient, once the
    // activations' saved tensors have gone (measured on `small`, TP 4, every:1).
    if (gathered_gradient() > 0) {
      const int64_t up = arch_.gated_mlp ? 2 * f : f;
      cost.backward_extra = std::max(
          cost.backward_extra, weight(d * up) + 3 * per_token(d) + per_local(d) - per_token(up));
    }
    // keep: the up (or fused gate-and-up) projection's output.
    cost.kept = keep_.mlp_in ? per_token(arch_.gated_mlp ? 2 * f : f) : 0;
    cost.rebuilt_extra = keep_.mlp_in ? gathered_input_extra() : 0;
    return cost;
  }

  int64_t embedding_output() const { return per_local(arch_.d_model); }
  // The final norm and the log-probabilities cross-entropy keeps. In slices, each slice's head
  // and loss run again in backward: only the norm's output (the slices' input) is kept. Split
  // over the vocabulary the loss always works in slices (one when not asked for more) and keeps
  // each token's log-normaliser besides (fp32).
  int64_t loss_saved() const {
    if (tp_ > 1) return final_norm_bytes() + tokens_ * 4;
    return norm_bytes() + (sliced() ? 0 : per_token(arch_.vocab));
  }
  // The logits, briefly beside the log-probabilities (of one slice when sliced); split, the
  // rank's fp32 logits of a slice beside their exponentials.
  int64_t loss_forward_extra() const {
    if (tp_ > 1) return 2 * slice_tokens() * (arch_.vocab / tp_) * 4;
    return sliced() ? 2 * per_slice(arch_.vocab) : per_token(arch_.vocab);
  }
  // Loss backward: the gradient of the log-probabilities and of the logits meet; the kept
  // log-probabilities and their gradient are freed before the LM head's (and, tied, the
  // embedding's) weight gradient appears beside the logits' gradient. Sliced (one node that
  // recomputes slice by slice): the hidden states' whole gradient from the start; per slice the
  // recomputed log-probabilities and those two gradients, beside the head's gradient summed so
  // far; then the slice's head gradient beside the logits' gradient and that sum.
  int64_t loss_backward_extra() const {
    const int64_t vocab = arch_.vocab / tp_;
    const int64_t head = weight(vocab * arch_.d_model);
    if (!sliced() && tp_ == 1) return std::max(per_token(2 * vocab), head);
    const int64_t slice = tp_ > 1 ? slice_tokens() * vocab * 4 : per_slice(vocab);
    return std::max(3 * slice + head, slice + 2 * head) + per_token(arch_.d_model);
  }
  int64_t residual_gradient() const { return per_local(arch_.d_model); }
  // Under sequence parallelism a sublayer's backward starts by gathering its output's gradient
  // over the ranks (the scatter's conjugate): the row-parallel projection's backward runs beside
  // that whole gradient.
  int64_t gathered_gradient() const {
    return local_tokens_ < tokens_ ? per_token(arch_.d_model) : 0;
  }
  // What a column projection's input gathered whole holds beyond the rank's slice.
  int64_t gathered_input_extra() const {
    return per_token(arch_.d_model) - per_local(arch_.d_model);
  }
  // A tied head's weight gradient is one input of the shared weight's accumulator, which waits
  // for the embedding's: it stays live from the loss's backward through the whole chain's.
  int64_t held_head_gradient() const {
    return arch_.tied_head ? weight(arch_.vocab / tp_ * arch_.d_model) : 0;
  }

 private:
  int64_t per_token(int64_t values) const { return values * tokens_ * v_; }
  // The residual stream's tokens: all of them, or a rank's 1/T under sequence parallelism.
  int64_t per_local(int64_t values) const { return values * local_tokens_ * v_; }
  bool sliced() const { return arch_.loss_chunks > 1; }
  // Tokens in one slice of the loss, as torch::chunk cuts them (the first slices the largest).
  int64_t slice_tokens() const { return (tokens_ + arch_.loss_chunks - 1) / arch_.loss_chunks; }
  int64_t per_slice(int64_t values) const { return values * slice_tokens() * v_; }
  // The output projection's result beside the sublayer's output as the tail makes it. Split, the
  // rank's partial result and the copy its sum over ranks reduces: an all-reduce's copy, or
  // under sequence parallelism its slices laid out for the reduce-scatter (whole either way).
  int64_t tail_extra() const { return per_token(arch_.d_model) * (tp_ > 1 ? 2 : 1); }
  // What a norm keeps, its output (the next matmul's input) included. LayerNorm: the output and
  // two statistics. RMSNorm runs in fp32 (the engine's Llama does): the fp32 copy of the input
  // (the input itself when it is fp32), the reciprocal RMS, the normalised values and the
  // scaled output, both in the activations' precision. Under sequence parallelism the norm runs
  // on the rank's tokens, and the projection after it keeps its input as sliced
  // (gathered_projection).
  int64_t norm_bytes() const {
    const int64_t d = arch_.d_model;
    if (!arch_.rms_norm) return per_local(d + 2);
    const int64_t fp32_copy = v_ == 4 ? 0 : d * 4;
    return (fp32_copy + 4) * local_tokens_ + per_local(2 * d);
  }
  // The final norm's: what the loss keeps is its output gathered over the whole sequence.
  int64_t final_norm_bytes() const {
    return norm_bytes() + per_token(arch_.d_model) - per_local(arch_.d_model);
  }
  int64_t weight(int64_t values) const { return values * v_; }
  int64_t backward_core(int64_t qkv, int64_t scores, bool math) const {
    const int64_t d = arch_.d_model;
    const int64_t dq = arch_.q_dim() / tp_;
    // Fused: the gradient of the core's output, of q, k, v and their concatenation into the
    // QKV gradient. Explicit: the gradients of the probabilities and of the scores (both s×s)
    // live together in softmax's backward, while the context's gradient and v's copy are
    // already freed. A single sequence's v is a view of the QKV tensor instead, which goes with
    // it unless k (not rotated) is a view of it too.
    // Rotated q and k: undoing the rotation holds one more q-sized gradient.
    const int64_t freed_by_v = qkv_kept() ? (arch_.rotary ? qkv : 0) : dq;
    const int64_t core =
        (math ? 2 * scores - dq - freed_by_v : dq + 2 * qkv) + (arch_.rotary ? dq : 0);
    return per_token(core) + weight(d * qkv);
  }
  // The explicit core's batched matmuls fold batch and heads into one dimension. k and v are
  // strided views of the QKV tensor (k a new tensor once rotated): folding a view copies it,
  // except for a single sequence (a batch of 1), where the fold is a view too and keeps the
  // whole QKV tensor alive instead. Shared K/V heads are copied by their repetition anyway.
  bool qkv_kept() const { return batch_ == 1 && arch_.kv_heads == arch_.heads; }

  const Architecture& arch_;
  int64_t batch_;
  int64_t tokens_;
  int64_t v_;
  bool selective_;
  KeptOutputs keep_;
  int64_t tp_;
  int64_t local_tokens_;
};

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
  if (scores_kept) bytes += score_terms * a * s * s * b / t;
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
        }
        continue;
      }
      int64_t busiest = 0;
      for (int64_t i = segment.begin; i < segment.end; ++i) {
        busiest =
            std::max(busiest, costs_[i].interior + costs_[i].forward_extra + costs_[i].output);
      }
      replay_.at(live_ + busiest + residual_ + kept(segment), "forward");
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
      replay_.at(2 * rank_largest_parameter_count(input_.arch, input_.layout.tp) * 4,
                 "optimizer step");  // fp32
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
      if (!(j + 1 < count_ && input_offloaded(j + 1))) live_ -= costs_[segment.end - 1].output;
      if (input_offloaded(j)) live_ += residual_;                 // fetched back
      if (j > 0 && input_offloaded(j - 1)) prefetch = residual_;  // read one ahead
      // The recomputation stops before the last sublayer's output projection and residual add:
      // that output is never rebuilt, except under sequence parallelism, where the tail's
      // backward needs its scatter's conjugate and the tail runs whole.
      // Kept outputs re-enter the rebuilt interior; those it does not hold (the attention's
      // projection output, the QKV tensor beside the explicit core's copies) are freed.
      live_ += saved(segment) + rebuilt_extra(segment) - kept(segment) -
               (input_.layout.sequence_parallel ? 0 : costs_[segment.end - 1].output);
      gradients = 2 * residual_;  // the segment's output gradient and the inner one
    }
    for (int64_t i = segment.end - 1; i >= segment.begin; --i) {
      // A sublayer's output is freed by its consumer's backward before its own begins.
      const bool early_stopped =
          segment.recompute && i == segment.end - 1 && !input_.layout.sequence_parallel;
      if (!early_stopped) live_ -= costs_[i].output;
      // An early-stopped tail's backward starts from the segment's output gradient itself (its
      // residual add hands it on as it is); an inner one is made where the branch rejoins.
      const int64_t held = early_stopped ? residual_ : gradients;
      replay_.at(live_ + held + costs_[i].backward_extra + prefetch, phase);
      live_ -= costs_[i].interior + (segment.recompute ? costs_[i].rebuilt_extra : 0);
    }
    if (input_offloaded(j)) live_ -= residual_;
    if (segment.recompute) live_ -= kReplayStateBytes;
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
    for (int64_t i = segment.begin; i < segment.end; ++i) bytes += costs_[i].rebuilt_extra;
    return bytes;
  }
  int64_t saved(const Segment& segment) const {
    int64_t bytes = 0;
    for (int64_t i = segment.begin; i < segment.end; ++i)
      bytes += costs_[i].interior + costs_[i].output;
    return bytes;
  }
  // Offloaded: a recomputed segment's input leaves the device after its forward.
  bool input_offloaded(int64_t j) const { return input_.offload && segments_[j].recompute; }

  const ActivationInput& input_;
  const EngineAccounting engine_;
  const std::vector<Segment>& segments_;
  const int64_t count_;
  const int64_t residual_;  // every segment boundary is this size
  std::vector<SublayerCost> costs_;
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
