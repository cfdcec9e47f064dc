// The FLOP count (estimate/flops.h) against the engine's own matrix products: one training step
// with each mm, addmm and bmm it dispatches (forward, backward and any
// recomputation) counted as 2·m·n·k. With the math attention core (sdpa's fused CPU
// kernel is one op that is not a matrix product) the model FLOPs of `none` and the hardware
// FLOPs of a recomputing policy must equal that count exactly: it is everything the count
// claims to count (norms, softmax, activations and the optimizer are not matrix products).
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "estimate/architecture.h"
#include "estimate/flops.h"
#include "model/model_config.h"
#include "run/run_config.h"
#include "tiny_variants.h"
#include "train/trainer.h"

namespace rematlab {
namespace engine_flops_suite {

// FLOPs of the matrix products dispatched on this thread while it counts (autograd runs a CPU
// backward on the thread that calls it). A RecordFunction callback, not the profiler: the
// engine's memory tracker holds this thread's profiler slot.
thread_local double g_counted_flops = 0.0;

int64_t size_at(const c10::IValue& tensor, int64_t dim) { return tensor.toTensor().size(dim); }

std::unique_ptr<at::ObserverContext> count_product(const at::RecordFunction& call) {
  const std::string name = call.name();
  const auto inputs = call.inputs();
  // mm(a, b), addmm(bias, a, b): 2·m·k·n; bmm(a, b), baddbmm(c, a, b): 2·batch·m·k·n.
  auto product = [&](std::size_t a, std::size_t b, bool batched) {
    const double m = static_cast<double>(size_at(inputs[a], batched ? 1 : 0));
    const double k = static_cast<double>(size_at(inputs[a], batched ? 2 : 1));
    const double n = static_cast<double>(size_at(inputs[b], batched ? 2 : 1));
    const double batch = batched ? static_cast<double>(size_at(inputs[a], 0)) : 1.0;
    g_counted_flops += 2.0 * batch * m * k * n;
  };
  if (name == "aten::mm") product(0, 1, false);
  if (name == "aten::addmm") product(1, 2, false);
  if (name == "aten::bmm") product(0, 1, true);
  if (name == "aten::baddbmm") product(1, 2, true);
  return nullptr;
}

// The matrix products' FLOPs of one training step of `config` (its first and only step).
double measured_matmul_flops(RunConfig config) {
  config.steps = 1;
  Trainer trainer(config);
  g_counted_flops = 0.0;
  const at::CallbackHandle handle =
      at::addThreadLocalCallback(at::RecordFunctionCallback(count_product)
                                     .needsInputs(true)
                                     .scopes({at::RecordScope::FUNCTION}));
  trainer.run();
  at::removeCallback(handle);
  return g_counted_flops;
}

// qwen3-tiny and mistral-tiny (tiny_variants.h): wide heads with q/k norms, and a sliding
// window of 24 of 64 tokens (blocks of 24 queries against 48 keys).
RunConfig config_for(const std::string& preset, const std::string& policy) {
  RunConfig config;
  config.model = testing::tiny_variant(preset);
  config.model.layers = 3;
  config.model.attention = AttentionKind::kMath;
  config.batch = 2;
  config.threads = 1;
  config.peak_flops = 1e12;  // given: the trainer measures no peak with matrix products
  config.checkpoint = policy;
  return config;
}

estimate::StepFlops counted(const RunConfig& config) {
  return estimate::step_flops(
      estimate::from_model_config(config.model), config.tokens_per_step(),
      CheckpointPolicy::parse(config.checkpoint).plan_for(config.model.layers, 0.0));
}

TEST(EngineFlops, TheCountIsTheEnginesMatrixProductsUnderEveryPolicy) {
  for (const char* preset : {"tiny", "llama-tiny", "qwen3-tiny", "mistral-tiny"}) {
    for (const char* policy :
         {"none", "every:1", "every:2", "sublayer:1,1", "selective", "keep:matmul"}) {
      SCOPED_TRACE(std::string(preset) + " " + policy);
      RunConfig config = config_for(preset, policy);
      config.model.dropout = 0.1;  // replayed, not a product: the count must not move
      const estimate::StepFlops flops = counted(config);
      EXPECT_DOUBLE_EQ(measured_matmul_flops(config), flops.hardware);
    }
  }
}

// A mixture of experts without a capacity: each token's k experts, its router and a shared
// expert, run again as the policy says (keep: spares the router's, the experts' [gate; up] and
// their down projections').
TEST(EngineFlops, TheCountIsTheEnginesMatrixProductsForAMixtureOfExperts) {
  for (const char* preset : {"moe-tiny", "qwen2-moe-tiny"}) {
    for (const char* policy : {"none", "every:1", "every:2", "sublayer:1,1", "selective",
                               "keep:matmul", "keep:router,expert-out"}) {
      SCOPED_TRACE(std::string(preset) + " " + policy);
      RunConfig config = config_for(preset, policy);
      const estimate::StepFlops flops = counted(config);
      EXPECT_DOUBLE_EQ(measured_matmul_flops(config), flops.hardware);
      if (std::string(policy) == "none") {
        EXPECT_DOUBLE_EQ(flops.hardware, flops.model);
      }
    }
  }
}

// Fine-tuning: a frozen base forms input gradients only, and only as far back as the first
// adapter; the adapters run beside their projections, again in a recomputed segment.
TEST(EngineFlops, TheCountIsTheEnginesMatrixProductsWithAdaptersOnAFrozenBase) {
  struct Case {
    const char* preset;
    const char* targets;
    const char* base;
  };
  for (const Case& c : {Case{"tiny", "all", "fp32"}, Case{"llama-tiny", "all", "fp32"},
                        Case{"llama-tiny", "o,down", "int8"}, Case{"llama-tiny", "gate,up", "nf4"},
                        Case{"tiny", "v", "fp32"}, Case{"llama-tiny", "o", "fp32"},
                        Case{"llama-tiny", "q,v", "fp32"}, Case{"mistral-tiny", "down", "nf4"}}) {
    for (const char* policy :
         {"none", "every:1", "every:2", "sublayer:1,1", "selective", "keep:matmul"}) {
      SCOPED_TRACE(std::string(c.preset) + " " + c.targets + " " + c.base + " " + policy);
      RunConfig config = config_for(c.preset, policy);
      config.model.lora = default_lora_options(config.model.family);
      config.model.lora.rank = 4;
      if (std::string(c.targets) != "all")
        config.model.lora.targets = parse_lora_targets(c.targets);
      config.model.lora.base = parse_base_precision(c.base);
      const estimate::StepFlops flops = counted(config);
      EXPECT_DOUBLE_EQ(measured_matmul_flops(config), flops.hardware);
    }
  }
}

// A LoRA run records its utilisation from those counts: less model work than full training's
// (at rank 4; rank 16's adapters on a 64-wide model cost as much as the weight gradients saved).
TEST(EngineFlops, ALoraRunRecordsItsUtilisation) {
  RunConfig config = config_for("llama-tiny", "every:1");
  config.steps = 2;
  config.model.lora = default_lora_options(config.model.family);
  config.model.lora.rank = 4;
  const RunSummary summary = Trainer(config).run();
  const estimate::StepFlops flops = counted(config);
  EXPECT_DOUBLE_EQ(summary.model_flops, flops.model);
  EXPECT_DOUBLE_EQ(summary.hardware_flops, flops.hardware);
  EXPECT_GT(summary.mfu, 0.0);
  EXPECT_GT(summary.hfu, summary.mfu);
  RunConfig full = config;
  full.model.lora = LoraOptions{};
  EXPECT_LT(flops.model, counted(full).model);
}

}  // namespace engine_flops_suite
}  // namespace rematlab
