// Checkpoint policies (the `--checkpoint` forms of the design) and the segment plans they yield.
//
// The model is a sequence of sublayers attn0, mlp0, attn1, mlp1, …; sublayer 2·i is block i's
// attention and 2·i+1 its MLP. A plan cuts that sequence into segments; a recomputed segment
// keeps only its input for backward and recomputes its interior there.
//
// Every plan can be written out as a list: `segments:a0-m1,a3,m4-m5` recomputes the segments
// a0…m1, a3 alone and m4…m5 (a for attention, m for MLP, block numbers from 0) and keeps every
// sublayer outside them. The named policies are shorthands: every:1 on two blocks is
// `segments:a0-m0,a1-m1`.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rematlab {

// A sublayer as users write it: "a0", "m0", "a1", … for sublayer 0, 1, 2, …
std::string sublayer_name(int64_t index);

struct Segment {
  int64_t begin = 0;  // first sublayer index
  int64_t end = 0;    // one past the last
  bool recompute = false;
};

// The projections whose outputs a `keep:` policy saves in forward instead of recomputing them.
// The MLP's down projection is not among them: it ends every block, and a recomputed segment's
// last projection is never recomputed (early stop). A mixture of experts has no one projection
// at its end: its router, its experts' [gate; up] (mlp-in) and their down projections
// (expert-out) can each be kept.
enum class KeptOutput { kQkv, kAttentionOut, kMlpIn, kRouter, kExpertOut };

struct KeptOutputs {
  bool qkv = false;
  bool attention_out = false;
  bool mlp_in = false;
  bool router = false;
  bool expert_out = false;

  bool any() const { return qkv || attention_out || mlp_in || router || expert_out; }
  bool has(KeptOutput which) const;
  // Every projection's output (`matmul`).
  static KeptOutputs every();
  // "matmul" when all are kept, else the names in a fixed order:
  // "qkv,attn-out,mlp-in,router,expert-out".
  std::string text() const;
  bool operator==(const KeptOutputs& other) const {
    return qkv == other.qkv && attention_out == other.attention_out && mlp_in == other.mlp_in &&
           router == other.router && expert_out == other.expert_out;
  }
};

struct CheckpointPlan {
  std::vector<Segment> segments;
  // `selective`: every block's attention core (QKᵀ, softmax, dropout, ·V) is recomputed.
  bool recompute_attention_core = false;
  // `keep:LIST`: outputs every recomputed segment saves in forward and does not recompute.
  KeptOutputs keep;
  // The K of `every:K` in force (also under `schedule`); 0 when the policy has none.
  int64_t interval = 0;

  int64_t recomputed_segments() const;
  // One line a person can read: "[a0 m0] [a1 m1]*" where * marks recomputed segments.
  std::string describe() const;
  // The plan as a policy that yields it again: `segments:…` naming the recomputed segments,
  // `none` when nothing is recomputed; `selective` and `keep:…` for plans whose recomputation
  // lies inside sublayers, which no segment list says.
  std::string canonical() const;
};

class CheckpointPolicy {
 public:
  // Throws InvalidInput("--checkpoint", …) naming the policy text. text() is the canonical
  // form: numbers without blanks or '+' (every:2, schedule:0=1,0.5=2, plan:200MiB), `keep:`
  // lists in one order, all five as keep:matmul; `segments:` lists in ascending order. No
  // canonical text holds a '+', which separates a policy from its offload (POLICY+OFFLOAD).
  static CheckpointPolicy parse(const std::string& text);
  static CheckpointPolicy none() { return parse("none"); }
  // `text` as text() writes it (numbers, `keep:` and `segments:` lists in one spelling), so
  // that one policy is recorded, grouped and compared under one name; text that is no policy
  // comes back as it is, for validate() to refuse in its own words.
  static std::string canonical_text(const std::string& text);

  // The plan for a model of `layers` blocks at `progress` ∈ [0, 1] of training (only `schedule`
  // depends on progress). Throws InvalidInput when a `segments:` list names a sublayer the
  // model does not have, and for `plan:`, which must be resolved first. `chunk_blocks`: the
  // blocks of each pipeline chunk in chain order where a run gives them (--pp-split), which a
  // `stages:` policy's lists follow; empty, they split as stage_blocks.h's rule does.
  CheckpointPlan plan_for(int64_t layers, double progress,
                          const std::vector<int64_t>& chunk_blocks = {}) const;

  const std::string& text() const { return text_; }
  enum class Kind {
    kNone,
    kEvery,
    kSublayer,
    kSelective,
    kSchedule,
    kKeep,
    kSegments,
    kPlan,
    kStages
  };
  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::kNone; }
  // `plan:BUDGET`: a segment list chosen when a run starts (core/plan/plan_policy.h), from costs
  // measured there; it has no plan of its own until then.
  bool is_plan() const { return kind_ == Kind::kPlan; }
  int64_t plan_budget_bytes() const { return plan_budget_bytes_; }
  // `stages:P0/P1/…`: the blocks split into as many stages as policies (as pipeline stages split
  // them, parallel/pipeline_schedule.h), each stage's blocks planned by its own policy as a model
  // of their own (every:2 groups from the stage's first block; segments: names them from a0).
  // Each is none, every:K, sublayer:A,F or segments:…; empty for any other policy.
  const std::vector<CheckpointPolicy>& stages() const { return stages_; }
  // `schedule:`'s entries (progress threshold, K), ascending; empty for any other policy.
  const std::vector<std::pair<double, int64_t>>& schedule() const { return schedule_; }

 private:
  void parse_stages(const std::string& text, const std::string& args);
  std::vector<Segment> stage_segments(int64_t layers,
                                      const std::vector<int64_t>& chunk_blocks) const;

  Kind kind_ = Kind::kNone;
  int64_t every_ = 0;
  int64_t attention_stride_ = 0;
  int64_t mlp_stride_ = 0;
  std::vector<std::pair<double, int64_t>> schedule_;  // (progress threshold, K), ascending
  KeptOutputs keep_;
  std::vector<Segment> recomputed_;       // `segments:`, ascending, disjoint
  int64_t plan_budget_bytes_ = 0;         // `plan:`
  std::vector<CheckpointPolicy> stages_;  // `stages:`
  std::string text_ = "none";
};

}  // namespace rematlab
