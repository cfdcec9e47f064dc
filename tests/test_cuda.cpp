// The GPU path: fp16 loss scaling, out-of-memory recovery, VRAM accounting against the caching
// allocator, deterministic gradient checks and the TF32 switch. They need a CUDA device and run
// in the GPU validation (bench/gpu_validation.sh); without one they are reported as skipped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#ifdef REMATLAB_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <set>
#include <string>

#include "cli_runner.h"
#include "common/errors.h"
#include "compat/torch_compat.h"
#include "launch/rank_launch.h"
#include "memory/device_memory.h"
#include "memory/memory_tracker.h"
#include "model/transformer.h"
#include "runtime/numerics.h"
#include "sweep/max_batch.h"
#include "tiny_variants.h"
#include "train/gradient_check.h"
#include "train/trainer.h"

namespace rematlab {

// Readable parameters in test listings (ADL finds it in AttentionKind's namespace).
inline void PrintTo(AttentionKind kind, std::ostream* out) { *out << to_string(kind); }

namespace {

constexpr int64_t kMiB = 1024 * 1024;

class CudaPath : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) {
      GTEST_SKIP() << "no CUDA device: the GPU path is tested in bench/gpu_validation.sh";
    }
  }

  static RunConfig cuda_run(int64_t steps) {
    RunConfig config;
    config.preset = "tiny";
    config.model = model_preset("tiny");
    config.device = "cuda";
    config.steps = steps;
    config.warmup_steps = 0;
    return config;
  }

  // One step cannot fit any current GPU: the fp32 logits alone are
  // 1024 × 1024 × 65536 × 4 bytes = 256 GiB, allocated in one piece after a small forward.
  static RunConfig impossible_run() {
    RunConfig config = cuda_run(2);
    config.model.seq_len = 1024;
    config.model.vocab = 65536;
    config.batch = 1024;
    return config;
  }
};

TEST_F(CudaPath, LocalRanksTakeCudaWithAGpuEachAndAreRefusedOneGpuOrMoreRanksThanGpus) {
  const int gpus = static_cast<int>(torch::cuda::device_count());
  EXPECT_NO_THROW(launch::check_local_ranks("cuda", gpus, "ranks", "device"));
  try {
    launch::check_local_ranks("cuda:0", 2, "ranks", "device");
    ADD_FAILURE() << "cuda:0 for two ranks was taken";
  } catch (const InvalidInput& error) {
    EXPECT_EQ(error.field(), "device") << error.what();
  }
  try {
    launch::check_local_ranks("cuda", gpus + 1, "ranks", "device");
    ADD_FAILURE() << gpus + 1 << " ranks were given " << gpus << " GPU(s)";
  } catch (const InvalidInput& error) {
    EXPECT_EQ(error.field(), "ranks") << error.what();
  }
}

TEST_F(CudaPath, Fp16OverflowSkipsTheStepHalvesTheScaleAndGoodStepsGrowIt) {
  RunConfig config = cuda_run(40);
  config.precision = Precision::kFp16;
  config.loss_scale = 1099511627776.0;  // 2^40: every fp16 gradient overflows at first
  config.loss_scale_growth_interval = 5;
  const RunSummary summary = Trainer(config).run();
  ASSERT_EQ(summary.status, RunStatus::kOk) << summary.message;
  const std::vector<StepMetrics>& steps = summary.steps;
  ASSERT_EQ(steps.size(), 40u);
  EXPECT_TRUE(steps.front().skipped);
  EXPECT_EQ(steps.front().loss_scale, config.loss_scale);
  int64_t skipped = 0;
  int64_t good_in_a_row = 0;
  int64_t growths = 0;
  for (std::size_t i = 0; i + 1 < steps.size(); ++i) {
    const double now = steps[i].loss_scale;
    const double next = steps[i + 1].loss_scale;
    if (steps[i].skipped) {
      ++skipped;
      good_in_a_row = 0;
      EXPECT_EQ(next, now / 2) << "after skipped step " << i;
      continue;
    }
    ++good_in_a_row;
    if (good_in_a_row == config.loss_scale_growth_interval) {
      EXPECT_EQ(next, now * 2) << "after " << good_in_a_row << " good steps, step " << i;
      good_in_a_row = 0;
      ++growths;
    } else {
      EXPECT_EQ(next, now) << "step " << i;
    }
  }
  EXPECT_GT(skipped, 0);
  EXPECT_LT(skipped, 39) << "the scale never came down far enough";
  EXPECT_GT(growths, 0);
  EXPECT_LT(summary.final_loss, summary.first_loss);
}

TEST_F(CudaPath, Fp16WithTheDefaultScaleTrains) {
  RunConfig config = cuda_run(30);
  config.precision = Precision::kFp16;
  const RunSummary summary = Trainer(config).run();
  ASSERT_EQ(summary.status, RunStatus::kOk) << summary.message;
  EXPECT_LT(summary.final_loss, summary.first_loss - 0.5);
}

TEST_F(CudaPath, OutOfMemoryEndsTheRunAsOomEmptiesTheCacheAndTheProcessGoesOn) {
  const c10::Device device("cuda");
  {
    Trainer trainer(impossible_run());
    const RunSummary summary = trainer.run();
    EXPECT_EQ(summary.status, RunStatus::kOom);
    EXPECT_NE(summary.message.find("ran out of device memory"), std::string::npos)
        << summary.message;
    // The trainer still holds its model, gradients and data; the step's blocks went back.
    EXPECT_LT(device_memory::counters(device).reserved, 1024 * kMiB);
  }
  const RunSummary after = Trainer(cuda_run(3)).run();
  EXPECT_EQ(after.status, RunStatus::kOk) << after.message;
  EXPECT_EQ(after.steps_completed, 3);
}

TEST_F(CudaPath, MaxBatchProbeRecordsARealOutOfMemoryAndTheNextProbeRuns) {
  const RunConfig base = impossible_run();
  const BatchProbe too_big = probe_by_training(base, base.batch, /*steps=*/2, nullptr);
  EXPECT_EQ(too_big.status, RunStatus::kOom) << too_big.message;
  const BatchProbe small = probe_by_training(base, /*batch=*/1, /*steps=*/2, nullptr);
  EXPECT_EQ(small.status, RunStatus::kOk) << small.message;
  EXPECT_GT(small.peak_bytes, 0);
}

TEST_F(CudaPath, TrackerAgreesWithTheCachingAllocatorOnAKnownAllocation) {
#ifdef REMATLAB_WITH_CUDA
  const c10::Device device("cuda");
  const auto stats = [&] {
    // "cuda" has no number; the allocator is asked about the current device.
    return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  };
  constexpr std::size_t kAggregate = 0;
  MemoryTracker tracker(device);
  const int64_t before = tracker.current_bytes();
  torch::Tensor kept = torch::empty({4 * kMiB / 4}, torch::dtype(torch::kFloat).device(device));
  EXPECT_EQ(tracker.current_bytes() - before, 4 * kMiB);
  EXPECT_EQ(tracker.current_bytes(), stats().allocated_bytes[kAggregate].current);

  tracker.reset_peak();
  {
    torch::Tensor transient =
        torch::empty({16 * kMiB / 4}, torch::dtype(torch::kFloat).device(device));
  }
  EXPECT_EQ(tracker.current_bytes() - before, 4 * kMiB);
  EXPECT_EQ(tracker.peak_bytes() - before, 20 * kMiB);
  EXPECT_EQ(tracker.peak_bytes(), stats().allocated_bytes[kAggregate].peak);
  EXPECT_EQ(tracker.reserved_bytes(), stats().reserved_bytes[kAggregate].peak);
  EXPECT_GE(tracker.reserved_bytes(), 20 * kMiB);
  // The device holds the allocator's blocks plus the CUDA context and library workspaces.
  EXPECT_GT(tracker.device_used_bytes(), tracker.reserved_bytes());
#else
  GTEST_SKIP() << "LibTorch without CUDA: no caching allocator to compare with";
#endif
}

// A run measures the device before it builds anything on it. The first H200 showed that asking
// the caching allocator for its counters in a process with no CUDA tensor yet throws ("did you
// call init?"); the CLI is a fresh process, so this is that first question every time.
TEST_F(CudaPath, AFreshProcessMeasuresTheDeviceBeforeItsFirstTensor) {
  const auto result = testing::cli("run --preset tiny --device cuda --steps 2 --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto run = testing::last_line_json(result.out);
  EXPECT_EQ(run.at("status"), "ok");
  EXPECT_GT(run.at("peak_bytes").get<int64_t>(), 0);
  EXPECT_GE(run.at("reserved_bytes").get<int64_t>(), run.at("peak_bytes").get<int64_t>());
}

TEST_F(CudaPath, StepsReportReservedAndDeviceMemoryAboveLiveBytes) {
  const RunSummary summary = Trainer(cuda_run(3)).run();
  ASSERT_EQ(summary.status, RunStatus::kOk) << summary.message;
  for (const StepMetrics& step : summary.steps) {
    EXPECT_GE(step.reserved_bytes, step.peak_bytes) << "step " << step.step;
    EXPECT_GT(step.device_used_bytes, step.reserved_bytes) << "step " << step.step;
  }
  EXPECT_GT(summary.reserved_bytes, 0);
  EXPECT_GT(summary.device_used_bytes, summary.reserved_bytes);
}

class CudaGradientCheck
    : public CudaPath,
      public ::testing::WithParamInterface<std::tuple<std::string, AttentionKind>> {};

TEST_P(CudaGradientCheck, IsIdenticalToNoneUnderDeterministicAlgorithms) {
  const auto& [policy, attention] = GetParam();
  RunConfig config = cuda_run(1);
  config.model.layers = 3;
  config.model.dropout = 0.1;
  config.model.attention = attention;
  config.batch = 4;
  config.accum = 2;
  config.checkpoint = policy;
  const GradientCheckResult result = check_gradients(config);
  EXPECT_TRUE(result.identical) << policy << ": max abs diff " << result.max_abs_diff << " in "
                                << result.worst_param;
  EXPECT_EQ(result.loss_diff, 0.0);
  EXPECT_FALSE(at::globalContext().deterministicAlgorithms()) << "the check left it switched on";
}

INSTANTIATE_TEST_SUITE_P(
    Policies, CudaGradientCheck,
    ::testing::Combine(::testing::Values("every:1", "every:2", "sublayer:1,2", "sublayer:1,1",
                                         "selective", "schedule:0=1,0.5=2", "keep:matmul"),
                       ::testing::Values(AttentionKind::kSdpa, AttentionKind::kMath)),
    [](const auto& param_info) {
      std::string name = std::get<0>(param_info.param);
      for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name + (std::get<1>(param_info.param) == AttentionKind::kMath ? "_math" : "_sdpa");
    });

// On CUDA the fused-attention dispatcher chooses among flash, memory-efficient, cuDNN and math
// kernels, and whether the inputs require grad is one of its criteria: a checkpointed segment's
// no-grad forward and its recomputation must still run the same kernel (other kernels draw other
// dropout masks). Logged per call; then bit-identical gradients without deterministic mode,
// with a bf16 shape where the fused kernels apply.
TEST_F(CudaPath, RecomputationRunsTheAttentionKernelOfTheForward) {
  RunConfig config = cuda_run(1);
  config.model = model_preset("small");
  config.model.layers = 2;
  config.model.dropout = 0.1;
  config.precision = Precision::kBf16;
  config.batch = 4;
  config.checkpoint = "every:1";
  config.deterministic = false;
  AttentionKernelLog log;
  Trainer trainer(config);
  ASSERT_TRUE(trainer.accumulate_gradients(trainer.policy().plan_for(config.model.layers, 0.0)));
  std::set<int> forward_kernels, recompute_kernels;
  for (const auto& [grad, backend] : log.entries())
    (grad ? recompute_kernels : forward_kernels).insert(backend);
  ASSERT_FALSE(forward_kernels.empty());
  EXPECT_EQ(forward_kernels, recompute_kernels);
  EXPECT_EQ(forward_kernels.count(-1), 0u) << "this LibTorch cannot name its kernel";
}

// A sliding window over key/value heads shared by several query heads: CUDA's kernels that take
// a mask may refuse shared heads, and the math fallback keeps every block's probabilities. The
// masked blocks must run fused (k and v repeated where needed), and every:1 must stay exact.
TEST_F(CudaPath, AWindowOverSharedKeyValueHeadsRunsFusedAndStaysExact) {
  for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
    RunConfig config = cuda_run(1);
    config.preset = "llama-tiny";
    config.model = testing::tiny_variant("mistral-tiny");
    ASSERT_LT(config.model.kv_heads, config.model.heads);
    config.precision = precision;
    config.batch = 2;
    config.checkpoint = "every:1";
    {
      const AttentionKernelLog log;
      Trainer trainer(config);
      ASSERT_TRUE(
          trainer.accumulate_gradients(trainer.policy().plan_for(config.model.layers, 0.0)));
      ASSERT_FALSE(log.entries().empty());
      for (const auto& [grad, backend] : log.entries())
        EXPECT_NE(backend, compat::kSdpaMathBackend) << to_string(precision);
    }
    const GradientCheckResult check = check_gradients(config);
    EXPECT_TRUE(check.identical) << to_string(precision) << ": " << check.worst_param << " off by "
                                 << check.max_abs_diff;
  }
}

// Without a window: in fp32 the memory-efficient kernel, CUDA's only fused one there, refuses
// key/value heads shared by several query heads (the H200 chose the explicit kernel, which keeps
// seq × seq probabilities); k and v are repeated instead, and every:1 stays exact.
TEST_F(CudaPath, SharedHeadsInFp32RunFusedAndStayExact) {
  RunConfig config = cuda_run(1);
  config.preset = "llama-tiny";
  config.model = testing::tiny_variant("llama-tiny");
  ASSERT_LT(config.model.kv_heads, config.model.heads);
  config.precision = Precision::kFp32;
  config.batch = 2;
  config.checkpoint = "every:1";
  {
    const AttentionKernelLog log;
    Trainer trainer(config);
    ASSERT_TRUE(trainer.accumulate_gradients(trainer.policy().plan_for(config.model.layers, 0.0)));
    ASSERT_FALSE(log.entries().empty());
    for (const auto& [grad, backend] : log.entries()) EXPECT_NE(backend, compat::kSdpaMathBackend);
  }
  const GradientCheckResult check = check_gradients(config);
  EXPECT_TRUE(check.identical) << check.worst_param << " off by " << check.max_abs_diff;
}

// The kernel choice is asked for in grad mode, whatever the caller's mode: LibTorch counts
// "requires grad" only with grad mode on, so a no-grad forward would otherwise get the other
// choice wherever the two differ (head width 256 and bf16/fp32 among the cases tried here).
TEST_F(CudaPath, TheKernelIsTheOneAGradEnabledCallGets) {
  for (const auto dtype : {torch::kBFloat16, torch::kFloat}) {
    for (const int64_t head_dim : {64, 128, 192, 256}) {
      for (const double dropout : {0.0, 0.1}) {
        const auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
        const torch::Tensor q = torch::randn({2, 8, 128, head_dim}, options);
        const torch::Tensor kv = torch::randn({2, 2, 128, head_dim}, options);
        int64_t with_grad = 0;
        {
          const c10::AutoGradMode grad(true);
          with_grad = at::_fused_sdp_choice(
              q.detach().requires_grad_(true), kv.detach().requires_grad_(true),
              kv.detach().requires_grad_(true), {}, dropout, true, std::nullopt, true);
        }
        const torch::NoGradGuard no_grad;
        EXPECT_EQ(compat::sdpa_backend_with_grad(q, kv, kv, dropout, true, true), with_grad)
            << "head " << head_dim << ", dropout " << dropout;
      }
    }
  }
}

// Largest error of an fp32 matmul on the device against the same product in fp64.
double matmul_error() {
  torch::manual_seed(0);
  const auto options = torch::dtype(torch::kFloat).device(torch::kCUDA);
  const torch::Tensor a = torch::randn({512, 2048}, options);
  const torch::Tensor b = torch::randn({2048, 512}, options);
  const torch::Tensor exact = torch::matmul(a.to(torch::kDouble), b.to(torch::kDouble));
  return (torch::matmul(a, b).to(torch::kDouble) - exact).abs().max().item<double>();
}

TEST_F(CudaPath, Tf32SwitchHoldsForTheRunAndChangesFp32Matmuls) {
  ASSERT_FALSE(at::globalContext().allowTF32CuBLAS()) << "LibTorch's default changed";
  const double fp32_error = matmul_error();
  double tf32_error = 0.0;
  {
    RunConfig config = cuda_run(1);
    config.tf32 = true;
    Trainer trainer(config);
    EXPECT_TRUE(at::globalContext().allowTF32CuBLAS());
    tf32_error = matmul_error();
    EXPECT_EQ(trainer.run().status, RunStatus::kOk);
  }
  EXPECT_FALSE(at::globalContext().allowTF32CuBLAS());
  // TF32 keeps 10 mantissa bits of fp32's 23: sums of 2048 products are off by ~1e-2, not ~1e-5.
  EXPECT_GT(tf32_error, 20 * fp32_error) << "fp32 " << fp32_error << ", tf32 " << tf32_error;
  EXPECT_EQ(matmul_error(), fp32_error);
}

TEST_F(CudaPath, DeterministicRunsRepeatBitForBit) {
  RunConfig config = cuda_run(5);
  config.model.dropout = 0.1;
  config.deterministic = true;
  const RunSummary first = Trainer(config).run();
  const RunSummary second = Trainer(config).run();
  ASSERT_EQ(first.steps.size(), second.steps.size());
  for (std::size_t i = 0; i < first.steps.size(); ++i) {
    EXPECT_EQ(first.steps[i].loss, second.steps[i].loss) << "step " << i;
  }
  EXPECT_NE(std::getenv("CUBLAS_WORKSPACE_CONFIG"), nullptr);
}

}  // namespace
}  // namespace rematlab
