#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>

#include "checkpoint/checkpoint_policy.h"
#include "checkpoint/kept_outputs.h"
#include "checkpoint/quantised_weight.h"
#include "checkpoint/replay_state.h"
#include "checkpoint/segment_checkpoint.h"
#include "checkpoint/sublayer_tail.h"
#include "common/errors.h"
#include "compat/torch_compat.h"
#include "memory/memory_tracker.h"
#include "model/transformer.h"
#include "run/run_config.h"
#include "tiny_variants.h"
#include "train/gradient_check.h"
#include "train/trainer.h"

namespace rematlab {
namespace {

std::vector<std::tuple<int64_t, int64_t, bool>> spans(const CheckpointPlan& plan) {
  std::vector<std::tuple<int64_t, int64_t, bool>> result;
  for (const auto& s : plan.segments) result.emplace_back(s.begin, s.end, s.recompute);
  return result;
}

TEST(CheckpointPolicy, NamedFormsYieldTheDesignedSegments) {
  using V = std::vector<std::tuple<int64_t, int64_t, bool>>;
  EXPECT_EQ(spans(CheckpointPolicy::parse("none").plan_for(3, 0)), V({{0, 6, false}}));
  EXPECT_EQ(spans(CheckpointPolicy::parse("every:1").plan_for(3, 0)),
            V({{0, 2, true}, {2, 4, true}, {4, 6, true}}));
  // ceil(5 / 2) segments; the last one is short.
  EXPECT_EQ(spans(CheckpointPolicy::parse("every:2").plan_for(5, 0)),
            V({{0, 4, true}, {4, 8, true}, {8, 10, true}}));
  EXPECT_EQ(spans(CheckpointPolicy::parse("every:9").plan_for(4, 0)), V({{0, 8, true}}));
  // Boundaries before a0, m0, a1, a2, m2, a3: attention every block, the MLP every 2 blocks.
  EXPECT_EQ(
      spans(CheckpointPolicy::parse("sublayer:1,2").plan_for(4, 0)),
      V({{0, 1, true}, {1, 2, true}, {2, 4, true}, {4, 5, true}, {5, 6, true}, {6, 8, true}}));
  EXPECT_EQ(spans(CheckpointPolicy::parse("sublayer:2,1").plan_for(2, 0)),
            V({{0, 1, true}, {1, 3, true}, {3, 4, true}}));
  const CheckpointPlan selective = CheckpointPolicy::parse("selective").plan_for(3, 0);
  EXPECT_EQ(spans(selective), V({{0, 6, false}}));
  EXPECT_TRUE(selective.recompute_attention_core);
  EXPECT_EQ(CheckpointPolicy::parse("every:1").plan_for(2, 0).describe(), "[a0 m0]* [a1 m1]*");
}

TEST(CheckpointPolicy, KeepListsAreBlocksWithKeptOutputsInOneCanonicalText) {
  const CheckpointPolicy some = CheckpointPolicy::parse("keep:mlp-in,qkv");
  EXPECT_EQ(some.text(), "keep:qkv,mlp-in");
  const CheckpointPlan plan = some.plan_for(3, 0);
  EXPECT_EQ(spans(plan), spans(CheckpointPolicy::parse("every:1").plan_for(3, 0)));
  EXPECT_TRUE(plan.keep.qkv && plan.keep.mlp_in && !plan.keep.attention_out);
  EXPECT_EQ(plan.describe(), "[a0 m0]* [a1 m1]* [a2 m2]* (kept: qkv,mlp-in)");
  EXPECT_EQ(CheckpointPolicy::parse("keep:qkv,attn-out,mlp-in,router,expert-out").text(),
            "keep:matmul");
  EXPECT_EQ(CheckpointPolicy::parse("keep:expert-out,router").text(), "keep:router,expert-out");
  EXPECT_EQ(CheckpointPolicy::parse("keep:matmul").plan_for(1, 0).keep,
            (KeptOutputs{true, true, true, true, true}));
  EXPECT_FALSE(CheckpointPolicy::parse("every:1").plan_for(1, 0).keep.any());
}

TEST(CheckpointPolicy, ScheduleFollowsTrainingProgress) {
  const auto policy = CheckpointPolicy::parse("schedule:0=2,0.1=3,0.5=5");
  EXPECT_EQ(policy.plan_for(10, 0.0).interval, 2);
  EXPECT_EQ(policy.plan_for(10, 0.09).interval, 2);
  EXPECT_EQ(policy.plan_for(10, 0.1).interval, 3);
  EXPECT_EQ(policy.plan_for(10, 0.7).interval, 5);
  EXPECT_EQ(policy.plan_for(10, 0.7).segments.size(), 2u);
  // A blank after a comma is read as std::stod read it.
  EXPECT_EQ(CheckpointPolicy::parse("schedule:0=2, 0.5=5").plan_for(10, 0.7).interval, 5);
}

TEST(CheckpointPolicy, ParseErrorsNameThePolicyText) {
  for (const char* bad : {"every",
                          "every:0",
                          "every:x",
                          "every:2x",
                          "sublayer:1",
                          "sublayer:0,2",
                          "sublayer:1,2,3",
                          "schedule:0.1=2",
                          "schedule:0=2,0=3",
                          "schedule:0=2,1.5=3",
                          "schedule:",
                          "schedule:0=0",
                          "none:3",
                          "selective:1",
                          "bogus",
                          "",
                          "plan:",
                          "plan:lots",
                          "plan:0",
                          "keep",
                          "keep:",
                          "keep:mm",
                          "keep:qkv,",
                          "keep:mlp-out"}) {
    try {
      CheckpointPolicy::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidInput& error) {
      EXPECT_EQ(error.field(), "--checkpoint");
      EXPECT_NE(std::string(error.what()).find("'" + std::string(bad) + "'"), std::string::npos)
          << error.what();
    }
  }
}

TEST(CheckpointPolicy, CanonicalTextGivesOnePolicyOneNameAndLeavesOtherTextAlone) {
  EXPECT_EQ(CheckpointPolicy::canonical_text("keep:mlp-in,qkv"), "keep:qkv,mlp-in");
  EXPECT_EQ(CheckpointPolicy::canonical_text("segments:a0-a0,m1-a2"), "segments:a0,m1-a2");
  EXPECT_EQ(CheckpointPolicy::parse("segments:a0-a0,m1-a2").text(), "segments:a0,m1-a2");
  EXPECT_EQ(CheckpointPolicy::canonical_text("every:2"), "every:2");
  // Not a policy: left for validate() to refuse with its own message.
  EXPECT_EQ(CheckpointPolicy::canonical_text("evry:2"), "evry:2");
}

// Numbers as std::stod and std::stoll read them (blanks, '+') name the same policy; none of the
// canonical texts holds a '+', which separates a policy from its offload.
TEST(CheckpointPolicy, NumbersTypedWithBlanksOrPlusSignsHaveOneCanonicalSpelling) {
  const std::vector<std::pair<std::string, std::string>> typed = {
      {"every:+2", "every:2"},
      {"every: 2", "every:2"},
      {"sublayer:+1, 2", "sublayer:1,2"},
      {"schedule:0=1,+0.5=2", "schedule:0=1,0.5=2"},
      {"schedule:0=2, 0.1=3,0.50=5", "schedule:0=2,0.1=3,0.5=5"},
      {"plan:+200MiB", "plan:200MiB"},
      {"plan:1.5GiB", "plan:1536MiB"},
      {"plan:200MB", "plan:200MB"}};
  for (const auto& [text, canonical] : typed) {
    EXPECT_EQ(CheckpointPolicy::canonical_text(text), canonical) << text;
    EXPECT_EQ(canonical.find('+'), std::string::npos);
    // The canonical text is the same policy: it parses to itself.
    EXPECT_EQ(CheckpointPolicy::canonical_text(canonical), canonical);
  }
  EXPECT_EQ(CheckpointPolicy::parse("plan:+200MiB").plan_budget_bytes(), int64_t{200} << 20);
}

TEST(PolicyAndOffload, SplitsAtThePlusBeforeAnOffloadModeOnly) {
  const auto parts = [](const std::string& text) {
    const PolicyAndOffload split = split_policy_and_offload(text);
    return split.checkpoint + " | " + split.offload.value_or("(run's)");
  };
  EXPECT_EQ(parts("every:1+disk"), "every:1 | disk");
  EXPECT_EQ(parts("every:1+disk:/tmp/a+b"), "every:1 | disk:/tmp/a+b");
  EXPECT_EQ(parts("every:+2"), "every:+2 | (run's)");
  EXPECT_EQ(parts("every:+2+host"), "every:+2 | host");
  EXPECT_EQ(parts("schedule:0=1,+0.5=2+none"), "schedule:0=1,+0.5=2 | none");
  EXPECT_EQ(parts("selective"), "selective | (run's)");
}

TEST(CheckpointPolicy, ASegmentListRecomputesWhatItNamesAndKeepsTheRest) {
  using V = std::vector<std::tuple<int64_t, int64_t, bool>>;
  const CheckpointPlan plan = CheckpointPolicy::parse("segments:a0-m1,a3,m4-m5").plan_for(6, 0);
  EXPECT_EQ(spans(plan),
            V({{0, 4, true}, {4, 6, false}, {6, 7, true}, {7, 9, false}, {9, 12, true}}));
  EXPECT_EQ(plan.canonical(), "segments:a0-m1,a3,m4-m5");
  EXPECT_EQ(spans(CheckpointPolicy::parse("segments:m0").plan_for(2, 0)),
            V({{0, 1, false}, {1, 2, true}, {2, 4, false}}));
}

// Every named policy is a shorthand for a segment list: its canonical list yields its plan.
TEST(CheckpointPolicy, EveryNamedPolicyIsASegmentList) {
  EXPECT_EQ(CheckpointPolicy::parse("every:1").plan_for(2, 0).canonical(), "segments:a0-m0,a1-m1");
  EXPECT_EQ(CheckpointPolicy::parse("none").plan_for(4, 0).canonical(), "none");
  EXPECT_EQ(CheckpointPolicy::parse("selective").plan_for(4, 0).canonical(), "selective");
  for (const char* named : {"every:1", "every:2", "every:3", "sublayer:1,2", "sublayer:2,1",
                            "sublayer:3,1", "segments:a1-a2,m3"}) {
    for (int64_t layers : {4, 5, 7}) {
      const CheckpointPlan plan = CheckpointPolicy::parse(named).plan_for(layers, 0);
      const std::string list = plan.canonical();
      EXPECT_EQ(list.rfind("segments:", 0), 0u) << named;
      EXPECT_EQ(spans(CheckpointPolicy::parse(list).plan_for(layers, 0)), spans(plan))
          << named << " on " << layers << " blocks as " << list;
    }
  }
}

// stages:P0/P1/…: the blocks split as pipeline stages split them, each stage's blocks planned by
// its own policy as a model of their own.
TEST(CheckpointPolicy, StagesPlanEachStagesBlocksWithItsOwnPolicy) {
  using V = std::vector<std::tuple<int64_t, int64_t, bool>>;
  // 5 blocks on 2 stages: 2 and 3. every:2 groups from the second stage's first block.
  const CheckpointPolicy two = CheckpointPolicy::parse("stages:every:1/every:2");
  EXPECT_EQ(two.text(), "stages:every:1/every:2");
  EXPECT_EQ(two.kind(), CheckpointPolicy::Kind::kStages);
  ASSERT_EQ(two.stages().size(), 2u);
  EXPECT_EQ(spans(two.plan_for(5, 0)),
            V({{0, 2, true}, {2, 4, true}, {4, 8, true}, {8, 10, true}}));
  // 10 blocks on 4 stages: 2, 3, 3, 2; segments: names a stage's blocks from a0.
  const CheckpointPolicy four = CheckpointPolicy::parse("stages:every:1/none/segments:m1/none");
  EXPECT_EQ(spans(four.plan_for(10, 0)), V({{0, 2, true},
                                            {2, 4, true},
                                            {4, 10, false},
                                            {10, 13, false},
                                            {13, 14, true},
                                            {14, 16, false},
                                            {16, 20, false}}));
  // A plan as any other: its canonical segment list recomputes the same segments.
  const CheckpointPlan plan = four.plan_for(10, 0);
  EXPECT_EQ(plan.canonical(), "segments:a0-m0,a1-m1,m6");
  EXPECT_EQ(CheckpointPolicy::parse(plan.canonical()).plan_for(10, 0).canonical(),
            plan.canonical());
  // Refused, naming the text: one stage, a whole-model policy inside, a stage without a block.
  for (const char* bad :
       {"stages:every:1", "stages:selective/none", "stages:keep:qkv/none", "stages:plan:1MiB/none",
        "stages:stages:none/none/none", "stages:every:1/", "stages:every:0/none"}) {
    try {
      CheckpointPolicy::parse(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const InvalidInput& error) {
      EXPECT_NE(std::string(error.what()).find("'" + std::string(bad) + "'"), std::string::npos)
          << error.what();
    }
  }
  try {
    CheckpointPolicy::parse("stages:none/every:x");
    ADD_FAILURE() << "every:x accepted";
  } catch (const InvalidInput& error) {
    EXPECT_EQ(error.reason(),
              "'stages:none/every:x': stage 1: 'every:x': K 'x' is not a whole number");
  }
  try {  // segments: names a stage's own blocks; past them, the stage and its size are said
    CheckpointPolicy::parse("stages:segments:m5/none").plan_for(4, 0);
    ADD_FAILURE() << "m5 of a 2-block stage accepted";
  } catch (const InvalidInput& error) {
    EXPECT_NE(error.reason().find("'stages:segments:m5/none': stage 0 (2 blocks, named from a0): "),
              std::string::npos)
        << error.reason();
  }
  try {
    CheckpointPolicy::parse("stages:none/none/none").plan_for(2, 0);
    ADD_FAILURE() << "3 stages of 2 blocks accepted";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("3 stages for 2 blocks"), std::string::npos)
        << error.what();
  }
}

TEST(CheckpointPolicy, ASegmentListIsRefusedWithTheReason) {
  for (const char* bad :
       {"segments:", "segments:x1", "segments:a1-a0", "segments:a0-m1,m0", "segments:a0,a0",
        "segments:a-1", "segments:b2", "segments:a1,", "segments:a99999999"}) {
    try {
      CheckpointPolicy::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidInput& error) {
      EXPECT_EQ(error.field(), "--checkpoint");
      EXPECT_NE(std::string(error.what()).find("'" + std::string(bad) + "'"), std::string::npos)
          << error.what();
    }
  }
  // Well formed, but the model has no fifth block.
  const CheckpointPolicy past = CheckpointPolicy::parse("segments:a0,m4");
  try {
    past.plan_for(4, 0);
    ADD_FAILURE() << "m4 accepted on a model of 4 blocks";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("m4 is past the model's last sublayer, m3"),
              std::string::npos)
        << error.what();
  }
}

// --- the mechanism, on a small function -------------------------------------------------

torch::Tensor noisy_layer(const torch::Tensor& x, const torch::Tensor& w) {
  return torch::dropout(torch::tanh(torch::matmul(x, w)), 0.5, /*train=*/true) + x;
}

TEST(SegmentCheckpoint, GradientsEqualPlainAutogradWithDropout) {
  torch::manual_seed(0);
  const torch::Tensor w = torch::randn({16, 16}, torch::requires_grad());
  const torch::Tensor x = torch::randn({8, 16}, torch::requires_grad());

  torch::manual_seed(42);
  noisy_layer(noisy_layer(x, w), w).pow(2).sum().backward();
  const torch::Tensor plain_w = w.grad().clone();
  const torch::Tensor plain_x = x.grad().clone();
  w.mutable_grad().zero_();
  x.mutable_grad().zero_();

  torch::manual_seed(42);
  auto fn = [&w](const torch::Tensor& in) { return noisy_layer(in, w); };
  torch::Tensor h = checkpoint_segment(fn, x, {w});
  h = checkpoint_segment(fn, h, {w});
  h.pow(2).sum().backward();
  EXPECT_TRUE(torch::equal(w.grad(), plain_w));
  EXPECT_TRUE(torch::equal(x.grad(), plain_x));
}

TEST(SegmentCheckpoint, ComparisonDetectsARecomputationThatDrawsOtherMasks) {
  // The control for the test above: a segment that reseeds itself each call draws a different
  // dropout mask when recomputed, and its gradients must then differ from plain autograd.
  torch::manual_seed(0);
  const torch::Tensor w = torch::randn({16, 16}, torch::requires_grad());
  const torch::Tensor x = torch::randn({8, 16});
  int calls = 0;
  auto reseeding = [&](const torch::Tensor& in) {
    torch::manual_seed(100 + calls++);
    return noisy_layer(in, w);
  };
  torch::manual_seed(100);
  noisy_layer(x, w).pow(2).sum().backward();
  const torch::Tensor plain = w.grad().clone();
  w.mutable_grad().zero_();
  calls = 0;
  checkpoint_segment(reseeding, x, {w}).pow(2).sum().backward();
  EXPECT_EQ(calls, 2);
  EXPECT_FALSE(torch::equal(w.grad(), plain));
}

TEST(SegmentCheckpoint, ParametersGetGradientsWhenTheInputNeedsNone) {
  torch::manual_seed(0);
  const torch::Tensor w = torch::randn({16, 16}, torch::requires_grad());
  const torch::Tensor frozen_input = torch::randn({8, 16});  // requires_grad = false
  torch::manual_seed(5);
  noisy_layer(frozen_input, w).sum().backward();
  const torch::Tensor plain = w.grad().clone();
  w.mutable_grad().zero_();
  torch::manual_seed(5);
  const torch::Tensor out = checkpoint_segment(
      [&w](const torch::Tensor& in) { return noisy_layer(in, w); }, frozen_input, {w});
  ASSERT_TRUE(out.requires_grad());
  out.sum().backward();
  EXPECT_TRUE(torch::equal(w.grad(), plain));
}

TEST(SegmentCheckpoint, IsAPlainCallUnderNoGrad) {
  const torch::Tensor w = torch::randn({4, 4}, torch::requires_grad());
  int calls = 0;
  torch::NoGradGuard no_grad;
  const torch::Tensor out = checkpoint_segment(
      [&](const torch::Tensor& in) {
        ++calls;
        return torch::matmul(in, w);
      },
      torch::randn({2, 4}), {w});
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(out.requires_grad());
}

TEST(SegmentCheckpoint, KeepsOnlyTheInputAndFreesEverythingWithTheGraph) {
  MemoryTracker tracker(c10::Device(c10::kCPU));
  const torch::Tensor w = torch::randn({256, 256}, torch::requires_grad());
  const torch::Tensor x = torch::randn({64, 256}, torch::requires_grad());
  auto deep = [&w](const torch::Tensor& in) {
    torch::Tensor h = in;
    for (int i = 0; i < 8; ++i) h = torch::tanh(torch::matmul(h, w));
    return h;
  };
  const int64_t before = tracker.current_bytes();
  {
    torch::Tensor plain = deep(x);  // keeps 8 tanh outputs of 64 KiB for backward
    EXPECT_GE(tracker.current_bytes() - before, 8 * 64 * 256 * 4);
  }
  EXPECT_EQ(tracker.current_bytes(), before);
  {
    // Keeps x (already live), the output, and the CPU generator's state for replay (5,056
    // bytes of Mersenne-Twister state).
    torch::Tensor kept = checkpoint_segment(deep, x, {w});
    const int64_t rng_state = at::detail::getDefaultCPUGenerator().get_state().nbytes();
    EXPECT_EQ(tracker.current_bytes() - before, 64 * 256 * 4 + rng_state);
  }
  // The graph went away without backward: the replay state is freed with it.
  EXPECT_EQ(tracker.current_bytes(), before);
}

TEST(SegmentCheckpoint, RecomputesUnderTheAutocastStateOfForward) {
  const torch::Tensor w = torch::randn({16, 16}, torch::requires_grad());
  const torch::Tensor x = torch::randn({4, 16}, torch::requires_grad());
  std::vector<std::pair<bool, at::ScalarType>> seen;  // (grad mode, dtype of the matmul)
  auto fn = [&](const torch::Tensor& in) {
    const torch::Tensor y = torch::matmul(in, w);
    seen.emplace_back(torch::GradMode::is_enabled(), y.scalar_type());
    return y.to(torch::kFloat).relu();
  };
  torch::Tensor out;
  {
    AutocastSnapshot bf16 = AutocastSnapshot::capture(at::kCPU);
    bf16.cpu_enabled = true;
    bf16.cpu_dtype = at::kBFloat16;
    ScopedAutocast autocast(bf16);
    out = checkpoint_segment(fn, x, {w});
  }
  out.sum().backward();  // outside autocast
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], std::make_pair(false, at::kBFloat16));  // forward, no grad
  EXPECT_EQ(seen[1], std::make_pair(true, at::kBFloat16));   // recomputation in backward
  EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
}

// --- early stop: a sublayer's tail backward without its projection ----------------------

struct TailGrads {
  torch::Tensor x, h, w, b;
};

// x + dropout(linear(h, w, b)) for rank-`rank` activations, its gradients formed either by plain
// autograd or by tail_backward, after seeding the generator with `seed`.
TailGrads tail_grads(bool early_stop, bool bias, int64_t rank, uint64_t seed, bool bf16) {
  torch::manual_seed(0);
  const std::vector<int64_t> lead =
      rank == 3 ? std::vector<int64_t>{4, 6} : std::vector<int64_t>{24};
  auto sized = [&](int64_t last) {
    std::vector<int64_t> sizes = lead;
    sizes.push_back(last);
    return sizes;
  };
  SublayerTail tail;
  tail.residual = torch::randn(sized(8), torch::requires_grad());
  tail.projection_input = torch::randn(sized(16), torch::requires_grad());
  tail.weight = torch::randn({8, 16}, torch::requires_grad());
  if (bias) tail.bias = torch::randn({8}, torch::requires_grad());
  tail.dropout = 0.3;
  tail.training = true;
  const torch::Tensor grad = torch::randn(sized(8));
  std::vector<torch::Tensor> wrt = {tail.residual, tail.projection_input, tail.weight};
  if (bias) wrt.push_back(tail.bias);

  torch::Tensor output;
  {
    // The forward under autocast (as a recomputation runs), the backward outside it.
    AutocastSnapshot state = AutocastSnapshot::capture(at::kCPU);
    state.cpu_enabled = bf16;
    state.cpu_dtype = at::kBFloat16;
    const ScopedAutocast autocast(state);
    torch::manual_seed(seed);
    output = early_stop ? tail_without_projection(tail) : tail.complete();
    EXPECT_TRUE(output.defined());
  }
  // Under autocast the residual stream stays fp32.
  EXPECT_EQ(output.scalar_type(), at::kFloat);
  const auto all = torch::autograd::grad({output}, wrt, {grad});
  return {all[0], all[1], all[2], bias ? all[3] : torch::Tensor()};
}

void expect_same(const TailGrads& a, const TailGrads& b, bool bias) {
  EXPECT_TRUE(torch::equal(a.x, b.x));
  EXPECT_TRUE(torch::equal(a.h, b.h));
  EXPECT_TRUE(torch::equal(a.w, b.w));
  EXPECT_EQ(a.w.scalar_type(), b.w.scalar_type());
  EXPECT_EQ(a.b.defined(), bias);
  EXPECT_EQ(b.b.defined(), bias);
  if (bias) {
    EXPECT_TRUE(torch::equal(a.b, b.b));
  }
}

TEST(TailBackward, EqualsAutogradOfTheTailBitForBit) {
  for (const bool bf16 : {false, true}) {
    for (const bool bias : {true, false}) {
      for (const int64_t rank : {2, 3}) {
        SCOPED_TRACE((bf16 ? "bf16 " : "fp32 ") + std::string(bias ? "bias " : "") + "rank " +
                     std::to_string(rank));
        expect_same(tail_grads(true, bias, rank, 7, bf16), tail_grads(false, bias, rank, 7, bf16),
                    bias);
      }
    }
  }
}

TEST(TailBackward, ComparisonDetectsAnotherDropoutMask) {
  // The control for the test above: the same tail under another generator state draws another
  // mask, and the gradients of h and of the weight must then differ.
  const TailGrads plain = tail_grads(false, true, 3, 7, false);
  const TailGrads other = tail_grads(true, true, 3, 8, false);
  EXPECT_TRUE(torch::equal(plain.x, other.x));  // the residual path has no mask
  EXPECT_FALSE(torch::equal(plain.h, other.h));
  EXPECT_FALSE(torch::equal(plain.w, other.w));
}

// Fine-tuning: a frozen projection with an adapter's term, its weight in fp32 or quantised. The
// early stop forms the term again and skips the projection; the gradients of the residual, of h
// (when it wants one) and of the adapter's two matrices are plain autograd's, bit for bit.
TEST(TailBackward, AFrozenTailWithAnAdapterOrAQuantisedWeightStopsEarlyBitForBit) {
  enum class Base { kFp32, kInt8, kNf4 };
  for (const Base base : {Base::kFp32, Base::kInt8, Base::kNf4}) {
    for (const bool bf16 : {false, true}) {
      for (const bool h_wants_gradient : {true, false}) {
        // GPT's projections have a (frozen) bias; Llama's have none.
        const bool bias = h_wants_gradient != bf16;
        SCOPED_TRACE(std::to_string(static_cast<int>(base)) + (bf16 ? " bf16" : " fp32") +
                     (h_wants_gradient ? "" : ", h wants no gradient") + (bias ? ", bias" : ""));
        auto grads = [&](bool early_stop) {
          torch::manual_seed(0);
          SublayerTail tail;
          tail.residual = torch::randn({4, 6, 8}, torch::requires_grad());
          // h is made by an operation, as in a model: autocast caches its casts of leaves that
          // want gradients, which would let the projection and the adapter share one.
          const torch::Tensor h_leaf = torch::randn({4, 6, 64}).requires_grad_(h_wants_gradient);
          tail.projection_input = h_leaf.clone();
          const torch::Tensor frozen = torch::randn({8, 64});
          tail.weight = frozen;
          if (bias) tail.bias = torch::randn({8});
          if (base != Base::kFp32) {
            tail.quantised = std::make_shared<const QuantisedWeight>(
                frozen, base == Base::kInt8 ? QuantisedFormat::kInt8 : QuantisedFormat::kNf4);
            tail.weight = torch::empty({0});
          }
          const torch::Tensor a = torch::randn({4, 64}, torch::requires_grad());
          const torch::Tensor b = torch::randn({8, 4}, torch::requires_grad());
          tail.adapter_term = [&](const torch::Tensor& h) {
            return torch::nn::functional::linear(torch::nn::functional::linear(h, a) * 0.5, b);
          };
          tail.dropout = 0.3;
          tail.training = true;
          torch::Tensor output;
          {
            AutocastSnapshot state = AutocastSnapshot::capture(at::kCPU);
            state.cpu_enabled = bf16;
            state.cpu_dtype = at::kBFloat16;
            const ScopedAutocast autocast(state);
            torch::manual_seed(7);
            output = early_stop ? tail_without_projection(tail) : tail.complete();
            EXPECT_TRUE(output.defined());
          }
          std::vector<torch::Tensor> wrt = {tail.residual, a, b};
          if (h_wants_gradient) wrt.push_back(h_leaf);
          return torch::autograd::grad({output}, wrt, {torch::randn({4, 6, 8})});
        };
        const auto plain = grads(false);
        const auto early = grads(true);
        ASSERT_EQ(plain.size(), early.size());
        for (std::size_t i = 0; i < plain.size(); ++i) {
          EXPECT_TRUE(torch::equal(plain[i], early[i])) << "gradient " << i;
        }
      }
    }
  }
}

TEST(TailBackward, AStridedProjectionInputIsNotSkipped) {
  // at::linear takes another route for a strided input of rank 3: the early stop declines it.
  SublayerTail tail;
  tail.residual = torch::randn({4, 6, 8});
  tail.projection_input = torch::randn({6, 4, 16}, torch::requires_grad()).transpose(0, 1);
  tail.weight = torch::randn({8, 16}, torch::requires_grad());
  EXPECT_FALSE(tail_without_projection(tail).defined());
  tail.projection_input = tail.projection_input.contiguous();
  EXPECT_TRUE(tail_without_projection(tail).defined());
}

// One training step's forward and backward of a 2-block model under `policy`, counting the
// projection calls of block 0.
struct ProjectionCounts {
  int qkv_forward = 0, qkv_recomputed = 0;
  int attention_out_forward = 0, attention_out_recomputed = 0;
  int mlp_up_forward = 0, mlp_up_recomputed = 0;
  int mlp_down_forward = 0, mlp_down_recomputed = 0;
};

ProjectionCounts count_projections(const std::string& preset, const std::string& policy) {
  ModelConfig model = model_preset(preset);
  model.layers = 2;
  model.dropout = 0.1;
  torch::manual_seed(0);
  Transformer transformer(model);
  transformer->train();
  const torch::Tensor tokens = torch::randint(model.vocab, {2, model.seq_len}, torch::kLong);
  const torch::Tensor targets = torch::randint(model.vocab, {2, model.seq_len}, torch::kLong);
  const auto params = transformer->named_parameters();
  const torch::Tensor qkv = params["block0_attn.qkv.weight"];
  const torch::Tensor out = params["block0_attn.out.weight"];
  const torch::Tensor up = params["block0_mlp.up.weight"];
  const torch::Tensor down = params["block0_mlp.down.weight"];
  ProjectionLog calls;
  transformer->loss(tokens, targets, CheckpointPolicy::parse(policy).plan_for(2, 0.0)).backward();
  EXPECT_TRUE(down.grad().defined() && out.grad().defined());
  return {calls.count(qkv, false),  calls.count(qkv, true), calls.count(out, false),
          calls.count(out, true),   calls.count(up, false), calls.count(up, true),
          calls.count(down, false), calls.count(down, true)};
}

TEST(EarlyStop, TheLastProjectionOfARecomputedSegmentIsNotRunAgain) {
  for (const char* preset : {"tiny", "llama-tiny"}) {
    SCOPED_TRACE(preset);
    // every:1: [a0 m0]* — the attention's projection is recomputed (the counter sees
    // recomputation), the MLP's down projection, the segment's tail, is not.
    const ProjectionCounts every = count_projections(preset, "every:1");
    EXPECT_EQ(every.attention_out_forward, 1);
    EXPECT_EQ(every.attention_out_recomputed, 1);
    EXPECT_EQ(every.mlp_down_forward, 1);
    EXPECT_EQ(every.mlp_down_recomputed, 0);
    // sublayer:1,1: [a0]* [m0]* — both projections end a segment.
    const ProjectionCounts each = count_projections(preset, "sublayer:1,1");
    EXPECT_EQ(each.attention_out_recomputed, 0);
    EXPECT_EQ(each.mlp_down_recomputed, 0);
    // none: one forward with grad, nothing recomputed.
    const ProjectionCounts none = count_projections(preset, "none");
    EXPECT_EQ(none.attention_out_forward + none.mlp_down_forward, 0);
    EXPECT_EQ(none.attention_out_recomputed, 1);
    EXPECT_EQ(none.mlp_down_recomputed, 1);
  }
}

TEST(KeptOutputs, KeptProjectionsAreNotRunAgainWhileTheRestIs) {
  for (const char* preset : {"tiny", "llama-tiny"}) {
    SCOPED_TRACE(preset);
    // keep:matmul — block 0's QKV, attention output and up projections run once, in forward.
    const ProjectionCounts kept = count_projections(preset, "keep:matmul");
    EXPECT_EQ(kept.qkv_forward, 1);
    EXPECT_EQ(kept.qkv_recomputed, 0);
    EXPECT_EQ(kept.attention_out_forward, 1);
    EXPECT_EQ(kept.attention_out_recomputed, 0);
    EXPECT_EQ(kept.mlp_up_forward, 1);
    EXPECT_EQ(kept.mlp_up_recomputed, 0);
    EXPECT_EQ(kept.mlp_down_recomputed, 0);
    // keep:qkv — only the QKV projection is spared; the control that the others are counted.
    const ProjectionCounts qkv = count_projections(preset, "keep:qkv");
    EXPECT_EQ(qkv.qkv_recomputed, 0);
    EXPECT_EQ(qkv.attention_out_recomputed, 1);
    EXPECT_EQ(qkv.mlp_up_recomputed, 1);
    const ProjectionCounts every = count_projections(preset, "every:1");
    EXPECT_EQ(every.qkv_recomputed, 1);
    EXPECT_EQ(every.mlp_up_recomputed, 1);
  }
}

// --- the model under every policy --------------------------------------------------------

RunConfig check_config(const std::string& policy, AttentionKind attention,
                       const std::string& preset = "tiny") {
  RunConfig config;
  config.model = testing::tiny_variant(preset);  // qwen3-tiny, mistral-tiny: tiny_variants.h
  config.model.layers = 3;                       // so every:2 has a short last segment
  config.model.dropout = 0.1;
  config.model.attention = attention;
  config.batch = 4;
  config.accum = 2;
  config.threads = 1;
  config.checkpoint = policy;
  return config;
}

class EveryPolicy
    : public ::testing::TestWithParam<std::tuple<std::string, AttentionKind, std::string>> {};

TEST_P(EveryPolicy, GradientsAndLossAreIdenticalToNone) {
  const auto& [policy, attention, preset] = GetParam();
  const GradientCheckResult result = check_gradients(check_config(policy, attention, preset));
  EXPECT_TRUE(result.identical) << policy << ": max abs diff " << result.max_abs_diff << " in "
                                << result.worst_param;
  EXPECT_EQ(result.max_abs_diff, 0.0);
  EXPECT_EQ(result.loss_diff, 0.0);
  // GPT: embeddings, 12 per block (2 norms × 2, 4 linears × 2), final norm × 2. Llama: token
  // embedding, 6 per block (2 norms, 4 linears without bias), final norm, head; Qwen 3 two more
  // norms a block.
  const int64_t per_block = preset == "tiny" ? 12 : preset == "qwen3-tiny" ? 8 : 6;
  EXPECT_EQ(result.params_compared, (preset == "tiny" ? 4 : 3) + 3 * per_block);
}

std::string policy_test_name(const std::string& policy, AttentionKind attention,
                             const std::string& preset) {
  std::string name = preset + "_" + policy;
  for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name + (attention == AttentionKind::kMath ? "_math" : "_sdpa");
}

INSTANTIATE_TEST_SUITE_P(
    Policies, EveryPolicy,
    ::testing::Combine(::testing::Values("every:1", "every:2", "every:4", "sublayer:1,2",
                                         "sublayer:2,1", "sublayer:1,1", "selective",
                                         "schedule:0=1,0.5=2", "keep:matmul", "keep:qkv",
                                         "keep:attn-out,mlp-in"),
                       ::testing::Values(AttentionKind::kSdpa, AttentionKind::kMath),
                       ::testing::Values("tiny", "llama-tiny", "qwen3-tiny", "mistral-tiny")),
    [](const auto& param_info) {
      return policy_test_name(std::get<0>(param_info.param), std::get<1>(param_info.param),
                              std::get<2>(param_info.param));
    });

// Any segment list, not only the named ones, is exact: random lists on three blocks of both
// families (fixed seed, so a failure names a list that can be run again).
TEST(SegmentListPolicy, RandomListsAreIdenticalToNone) {
  std::mt19937 random(2026);
  for (const char* preset : {"tiny", "llama-tiny"}) {
    for (int trial = 0; trial < 4; ++trial) {
      CheckpointPlan plan;
      for (int64_t begin = 0; begin < 6;) {
        const int64_t end = begin + 1 + static_cast<int64_t>(random() % 3);
        plan.segments.push_back({begin, std::min<int64_t>(end, 6), random() % 3 != 0});
        begin = end;
      }
      if (plan.recomputed_segments() == 0) plan.segments.front().recompute = true;
      const std::string list = plan.canonical();
      const GradientCheckResult result =
          check_gradients(check_config(list, AttentionKind::kSdpa, preset));
      EXPECT_TRUE(result.identical) << preset << " " << list << ": " << result.max_abs_diff;
      EXPECT_EQ(result.loss_diff, 0.0) << preset << " " << list;
    }
  }
}

// The sliced head and loss are checkpointed segments too: exact under every policy.
TEST(EveryPolicyWithChunkedLoss, GradientsAndLossAreIdenticalToNone) {
  for (const char* policy : {"every:1", "sublayer:1,2", "selective"}) {
    RunConfig config = check_config(policy, AttentionKind::kSdpa, "llama-tiny");
    config.model.loss_chunks = 3;
    const GradientCheckResult result = check_gradients(config);
    EXPECT_TRUE(result.identical) << policy << ": " << result.max_abs_diff;
  }
}

// The fused-attention kernel is chosen once, as with grad, for a segment's forward and its
// recomputation alike (tests/test_cuda.cpp checks it where the choice has several kernels).
TEST(SegmentCheckpoint, RecomputationIsGivenTheAttentionKernelOfTheForward) {
  RunConfig config;
  config.model = model_preset("tiny");
  config.model.dropout = 0.1;
  config.checkpoint = "every:1";
  AttentionKernelLog log;
  Trainer trainer(config);
  ASSERT_TRUE(trainer.accumulate_gradients(trainer.policy().plan_for(config.model.layers, 0.0)));
  std::vector<int> forward, recompute;
  for (const auto& [grad, backend] : log.entries()) (grad ? recompute : forward).push_back(backend);
  ASSERT_EQ(forward.size(), static_cast<std::size_t>(config.model.layers));
  EXPECT_EQ(forward, recompute);
  if (compat::kTorchAtLeast_2_4) {
    EXPECT_NE(forward.front(), -1);  // older ones cannot tell
  }
}

TEST(GradientCheck, DropoutIsReallyExercised) {
  RunConfig with = check_config("none", AttentionKind::kSdpa);
  RunConfig without = with;
  without.model.dropout = 0.0;
  EXPECT_NE(check_gradients(with).loss, check_gradients(without).loss);
}

TEST(GradientCheck, Bf16AutocastAgreesWithinBf16Tolerance) {
  RunConfig config = check_config("every:1", AttentionKind::kSdpa);
  config.precision = Precision::kBf16;
  const GradientCheckResult result = check_gradients(config);
  EXPECT_LT(result.loss_diff, 1e-2);
  EXPECT_LT(result.max_abs_diff, 1e-2);
}

// Under bf16 autocast on the CPU a recomputation replays the forward's casts and draws too: the
// policies that recompute (early stop included) or keep outputs give none's gradients exactly.
TEST(GradientCheck, Bf16AutocastIsBitIdenticalToNoneUnderRecomputingPolicies) {
  for (const char* policy : {"every:1", "sublayer:1,1", "keep:matmul", "keep:qkv"}) {
    RunConfig config = check_config(policy, AttentionKind::kSdpa);
    config.precision = Precision::kBf16;
    const GradientCheckResult result = check_gradients(config);
    EXPECT_TRUE(result.identical) << policy << ": max abs diff " << result.max_abs_diff << " in "
                                  << result.worst_param;
  }
}

TEST(CheckpointedTraining, TwentyStepsUnderEvery2MatchNoneStepForStep) {
  RunConfig config = check_config("none", AttentionKind::kSdpa);
  config.model.layers = 4;
  config.steps = 20;
  const RunSummary reference = Trainer(config).run();
  config.checkpoint = "every:2";
  const RunSummary checkpointed = Trainer(config).run();
  ASSERT_EQ(reference.steps.size(), 20u);
  ASSERT_EQ(checkpointed.steps.size(), 20u);
  for (std::size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(checkpointed.steps[i].loss, reference.steps[i].loss) << "step " << i;
  }
}

TEST(CheckpointedTraining, ScheduleReportsTheIntervalOfEachStep) {
  RunConfig config = check_config("schedule:0=1,0.5=3", AttentionKind::kSdpa);
  config.steps = 6;
  const RunSummary summary = Trainer(config).run();
  std::vector<int64_t> intervals;
  for (const auto& step : summary.steps) intervals.push_back(step.checkpoint_interval);
  EXPECT_EQ(intervals, std::vector<int64_t>({1, 1, 1, 3, 3, 3}));
  EXPECT_EQ(summary.steps.front().recomputed_segments, 3);
  EXPECT_EQ(summary.steps.back().recomputed_segments, 1);
}

// --- memory on the `small` shape ----------------------------------------------------------

// Two sequences: the policies' differences are per token, and a quarter of the batch it once
// had keeps these three tests to seconds.
constexpr int64_t kSmallBatch = 2;

RunSummary small_run(const std::string& policy, AttentionKind attention) {
  RunConfig config;
  config.preset = "small";
  config.model = model_preset("small");
  config.model.attention = attention;
  config.batch = kSmallBatch;
  config.steps = 2;  // one warm-up, one measured
  config.threads = 1;
  config.checkpoint = policy;
  return Trainer(config).run();
}

TEST(CheckpointMemory, PeakActivationFallsWithTheInterval) {
  const int64_t none = small_run("none", AttentionKind::kSdpa).peak_activation_bytes;
  const int64_t every4 = small_run("every:4", AttentionKind::kSdpa).peak_activation_bytes;
  const int64_t every2 = small_run("every:2", AttentionKind::kSdpa).peak_activation_bytes;
  const int64_t every1 = small_run("every:1", AttentionKind::kSdpa).peak_activation_bytes;
  EXPECT_GT(none, every4);
  EXPECT_GT(every4, every2);
  EXPECT_GT(every2, every1);
  EXPECT_LE(static_cast<double>(every1), 0.4 * static_cast<double>(none))
      << "every:1 " << every1 << " bytes against none " << none;
}

TEST(CheckpointMemory, KeepingProjectionsSitsBetweenEvery1AndNone) {
  const RunSummary none = small_run("none", AttentionKind::kSdpa);
  const RunSummary every1 = small_run("every:1", AttentionKind::kSdpa);
  const RunSummary matmul = small_run("keep:matmul", AttentionKind::kSdpa);
  const RunSummary qkv = small_run("keep:qkv", AttentionKind::kSdpa);
  EXPECT_GT(matmul.saved_activation_bytes, qkv.saved_activation_bytes);
  EXPECT_GT(qkv.saved_activation_bytes, every1.saved_activation_bytes);
  EXPECT_LT(matmul.saved_activation_bytes, none.saved_activation_bytes);
  EXPECT_LT(matmul.peak_activation_bytes, none.peak_activation_bytes);
  // Between forward and backward keep:qkv holds each block's QKV tensor (3·d per token for
  // GPT) more than every:1.
  const ModelConfig shape = model_preset("small");
  const int64_t qkv_bytes = kSmallBatch * shape.seq_len * 3 * shape.d_model * 4;
  EXPECT_EQ(qkv.saved_activation_bytes - every1.saved_activation_bytes, shape.layers * qkv_bytes);
}

TEST(CheckpointMemory, SelectiveDropsTheScoreTensorsOfMathAttention) {
  const RunSummary none = small_run("none", AttentionKind::kMath);
  const RunSummary selective = small_run("selective", AttentionKind::kMath);
  const ModelConfig shape = model_preset("small");
  // One layer's s×s probabilities in fp32: batch × heads × seq² × 4 bytes.
  const int64_t scores = kSmallBatch * shape.heads * shape.seq_len * shape.seq_len * 4;
  // Between forward and backward, `none` keeps every layer's probabilities; `selective` none.
  EXPECT_GE(none.saved_activation_bytes - selective.saved_activation_bytes, shape.layers * scores);
  // At the peak one layer's scores are live again while they are recomputed, next to their
  // gradient: the saving there is smaller by those two tensors.
  EXPECT_GE(none.peak_activation_bytes - selective.peak_activation_bytes,
            (shape.layers - 2) * scores);
}

}  // namespace
}  // namespace rematlab
