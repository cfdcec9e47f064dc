#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

#include "checkpoint/segment_checkpoint.h"
#include "common/errors.h"
#include "common/posix_files.h"
#include "common/process_identity.h"
#include "offload/disk_offload.h"
#include "offload/host_offload.h"
#include "train/gradient_check.h"
#include "train/trainer.h"

namespace rematlab {
namespace {

// A fresh parent directory per test, removed afterwards.
class TempParent {
 public:
  TempParent()
      : path_(files::join(files::temp_directory(), "rematlab-test-" + std::to_string(::getpid()) +
                                                       "-" + std::to_string(counter_++))) {
    files::make_directories(path_);
  }
  ~TempParent() { files::remove_tree(path_); }
  const std::string& path() const { return path_; }
  bool empty() const { return files::list(path_).empty(); }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

RunConfig deep_config(const std::string& policy, const std::string& offload) {
  RunConfig config;
  config.model = model_preset("tiny");
  config.model.layers = 12;
  config.model.dropout = 0.1;
  config.batch = 8;
  config.steps = 3;
  config.threads = 1;
  config.checkpoint = policy;
  config.offload = offload;
  return config;
}

TEST(DiskOffload, GradientsAreBitIdenticalToCheckpointingAlone) {
  TempParent parent;
  RunConfig config = deep_config("every:1", "disk:" + parent.path());
  config.accum = 2;
  const GradientCheckResult result = check_gradients(config);
  EXPECT_TRUE(result.identical) << result.max_abs_diff << " in " << result.worst_param;
  EXPECT_EQ(result.loss_diff, 0.0);
  EXPECT_TRUE(parent.empty());  // the store's directory went with its trainer
}

TEST(DiskOffload, KeptProjectionOutputsStayAndGradientsAreBitIdentical) {
  TempParent parent;
  const GradientCheckResult result =
      check_gradients(deep_config("keep:matmul", "disk:" + parent.path()));
  EXPECT_TRUE(result.identical) << result.max_abs_diff << " in " << result.worst_param;
  EXPECT_EQ(result.loss_diff, 0.0);
  EXPECT_TRUE(parent.empty());
}

TEST(DiskOffload, LossCurveEqualsCheckpointingAlone) {
  TempParent parent;
  const RunSummary plain = Trainer(deep_config("every:1", "none")).run();
  const RunSummary offloaded = Trainer(deep_config("every:1", "disk:" + parent.path())).run();
  ASSERT_EQ(plain.steps.size(), offloaded.steps.size());
  for (std::size_t i = 0; i < plain.steps.size(); ++i) {
    EXPECT_EQ(offloaded.steps[i].loss, plain.steps[i].loss) << "step " << i;
  }
}

TEST(DiskOffload, LowersPeakActivationByTheSavedInputs) {
  TempParent parent;
  const RunSummary plain = Trainer(deep_config("every:1", "none")).run();
  const RunSummary offloaded = Trainer(deep_config("every:1", "disk:" + parent.path())).run();
  const ModelConfig shape = deep_config("", "").model;
  const int64_t input_bytes = 8 * shape.seq_len * shape.d_model * 4;  // one segment input, fp32
  // Every one of the 12 segment inputs was on disk at once, before backward took the first back.
  EXPECT_EQ(offloaded.offloaded_peak_bytes, 12 * input_bytes);
  EXPECT_EQ(plain.offloaded_peak_bytes, 0);
  // At the peak (backward's start) at most the last input and the one prefetched are back.
  EXPECT_LT(offloaded.peak_activation_bytes, plain.peak_activation_bytes);
  EXPECT_LE(offloaded.peak_activation_bytes, plain.peak_activation_bytes - 8 * input_bytes)
      << "plain " << plain.peak_activation_bytes << ", offloaded "
      << offloaded.peak_activation_bytes;
}

// Backward blocked on an input still being written is measured as offload wait: with each
// write slowed to 100 ms, the fetch of the last input (stashed just before backward) waits.
TEST(DiskOffload, WaitingForASlowDiskIsMeasured) {
  TempParent parent;
  DiskOffloadOptions options;
  options.parent = parent.path();
  options.write_delay_for_tests = std::chrono::milliseconds(100);
  auto store = make_disk_offload_store(options);
  const torch::Tensor w = torch::randn({32, 32}, torch::requires_grad());
  torch::Tensor h = torch::randn({8, 32}, torch::requires_grad());
  {
    ScopedOffload scope(store.get());
    for (int i = 0; i < 2; ++i) {
      h = checkpoint_segment([&w](const torch::Tensor& x) { return torch::tanh(x.matmul(w)); }, h,
                             {w});
    }
  }
  store->reset_step_counters();
  store->begin_backward();
  h.sum().backward();
  EXPECT_GE(store->wait_ms(), 50.0);    // the writes had not finished: backward waited
  EXPECT_LT(store->wait_ms(), 5000.0);  // and only for them
}

TEST(DiskOffload, DroppedGraphRemovesItsFilesAtOnce) {
  TempParent parent;
  DiskOffloadOptions options;
  options.parent = parent.path();
  auto store = make_disk_offload_store(options);
  const std::string directory = disk_offload_directory(*store);
  const torch::Tensor w = torch::randn({64, 64}, torch::requires_grad());
  {
    ScopedOffload scope(store.get());
    torch::Tensor h = torch::randn({16, 64}, torch::requires_grad());
    for (int i = 0; i < 5; ++i) {
      h = checkpoint_segment([&w](const torch::Tensor& x) { return torch::tanh(x.matmul(w)); }, h,
                             {w});
    }
    // The graph (and with it every ticket) goes out of scope here, without backward: a cancel.
  }
  EXPECT_EQ(files::list(directory), std::vector<std::string>{"owner"});  // no tensor file left
  store.reset();
  EXPECT_FALSE(files::exists(directory));
  EXPECT_TRUE(parent.empty());
}

TEST(DiskOffload, CancelledRunLeavesNoFiles) {
  TempParent parent;
  RunConfig config = deep_config("every:2", "disk:" + parent.path());
  config.steps = 50;
  config.accum = 3;
  std::atomic<bool> cancel{false};
  TrainerCallbacks callbacks;
  callbacks.cancel = &cancel;
  callbacks.on_step = [&](const StepMetrics&) { cancel = true; };
  {
    Trainer trainer(config);
    EXPECT_EQ(trainer.run(callbacks).status, RunStatus::kCancelled);
  }
  EXPECT_TRUE(parent.empty());
}

TEST(DiskOffload, WriteErrorFailsTheStepCleanly) {
  TempParent parent;
  DiskOffloadOptions options;
  options.parent = parent.path();
  options.fail_after_bytes = 3 * 16 * 64 * 4;  // room for three segment inputs
  auto store = make_disk_offload_store(options);
  const torch::Tensor w = torch::randn({64, 64}, torch::requires_grad());
  bool failed = false;
  std::string message;
  try {
    torch::Tensor h = torch::randn({16, 64}, torch::requires_grad());
    {
      ScopedOffload scope(store.get());
      for (int i = 0; i < 8; ++i) {
        h = checkpoint_segment([&w](const torch::Tensor& x) { return torch::tanh(x.matmul(w)); }, h,
                               {w});
      }
    }
    store->begin_backward();
    h.sum().backward();
  } catch (const std::exception& error) {
    failed = true;
    message = error.what();
  }
  EXPECT_TRUE(failed);
  EXPECT_NE(message.find("no space left"), std::string::npos) << message;
  store.reset();  // no crash, no hang, and nothing left behind
  EXPECT_TRUE(parent.empty());
}

// An offload directory as a process would leave it: mode 0700, an owner file naming the host,
// pid and start time, optionally still locked by a live store.
std::string plant_offload_directory(const std::string& parent, const std::string& name,
                                    const std::string& owner) {
  const std::string directory = files::join(parent, "rematlab-offload-" + name);
  EXPECT_EQ(::mkdir(directory.c_str(), 0700), 0);
  std::ofstream(files::join(directory, "owner")) << owner;
  std::ofstream(files::join(directory, "segment-input-0.bin")) << "data";
  return directory;
}

TEST(DiskOffload, StaleCleanupRemovesOnlyDirectoriesOfProcessesCertainlyGone) {
  TempParent parent;
  const ProcessIdentity self = current_process();
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // its pid is free now
  auto owner = [&](const std::string& host, int64_t pid, int64_t ticks) {
    return host + " " + std::to_string(pid) + " " + std::to_string(ticks) + "\n";
  };
  const std::string dead =
      plant_offload_directory(parent.path(), "dead", owner(self.host, child, 1));
  // Our pid, but another start time: the pid was reused; the process that made it is gone.
  const std::string reused = plant_offload_directory(
      parent.path(), "reused", owner(self.host, self.pid, self.start_ticks + 1));
  const std::string alive =
      plant_offload_directory(parent.path(), "alive", owner(self.host, self.pid, self.start_ticks));
  // On shared storage: a process of another host is not ours to judge, alive or not.
  const std::string other_host =
      plant_offload_directory(parent.path(), "other", owner(self.host + "-elsewhere", child, 1));
  const std::string unowned = files::join(parent.path(), "rematlab-offload-unowned");
  ASSERT_EQ(files::make_directories(unowned), "");
  const std::string link = files::join(parent.path(), "rematlab-offload-link");
  ASSERT_EQ(::symlink(dead.c_str(), link.c_str()), 0);

  DiskOffloadOptions options;
  options.parent = parent.path();
  auto live_store = make_disk_offload_store(options);  // runs the cleanup first, holds its lock
  EXPECT_FALSE(files::exists(dead));
  EXPECT_FALSE(files::exists(reused));
  EXPECT_TRUE(files::exists(alive));
  EXPECT_TRUE(files::exists(other_host));
  EXPECT_TRUE(files::exists(unowned));
  EXPECT_TRUE(files::exists(link));  // a symlink is never followed nor removed
  // A live store's directory survives another cleanup even though its owner is this very
  // process: the lock it holds says it is in use.
  const std::string in_use = disk_offload_directory(*live_store);
  EXPECT_EQ(remove_stale_offload_directories(parent.path()), 0);
  EXPECT_TRUE(files::exists(in_use));
}

TEST(DiskOffload, APathAlreadyThereIsRefusedNotReused) {
  TempParent parent;
  DiskOffloadOptions options;
  options.parent = parent.path();
  options.name_for_tests = "planted";
  const std::string target = files::join(parent.path(), "elsewhere");
  ASSERT_EQ(files::make_directories(target), "");
  const std::string planted = files::join(parent.path(), "rematlab-offload-planted");
  ASSERT_EQ(::symlink(target.c_str(), planted.c_str()), 0);
  EXPECT_THROW(make_disk_offload_store(options), InvalidInput);  // a symlink
  ASSERT_EQ(::unlink(planted.c_str()), 0);
  ASSERT_EQ(files::make_directories(planted), "");
  EXPECT_THROW(make_disk_offload_store(options), InvalidInput);  // a directory
  EXPECT_TRUE(files::list(target).empty());  // nothing was written through the link
  ASSERT_EQ(::rmdir(planted.c_str()), 0);
  auto store = make_disk_offload_store(options);
  struct stat info {};
  ASSERT_EQ(::lstat(disk_offload_directory(*store).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
}

TEST(DiskOffload, BadOffloadSettingsNameTheFlag) {
  auto field_of = [](RunConfig config) -> std::string {
    try {
      validate(config);
    } catch (const InvalidInput& error) {
      return std::string(error.what());
    }
    return "accepted";
  };
  EXPECT_NE(field_of(deep_config("every:1", "host")).find("CUDA"), std::string::npos);
  EXPECT_NE(field_of(deep_config("none", "disk")).find("--offload"), std::string::npos);
  EXPECT_NE(field_of(deep_config("every:1", "tape")).find("--offload"), std::string::npos);
  EXPECT_EQ(field_of(deep_config("every:1", "disk")), "accepted");
  try {
    DiskOffloadOptions options;
    options.parent = "/proc/no-such-place";
    make_disk_offload_store(options);
    ADD_FAILURE() << "an uncreatable directory was accepted";
  } catch (const InvalidInput& error) {
    EXPECT_EQ(error.field(), "--offload");
  }
}

// Host offload exists only on CUDA. These run in the GPU validation (bench/gpu_validation.sh);
// here they are reported as skipped, with the reason.
class HostOffloadOnCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) {
      GTEST_SKIP() << "no CUDA device: host offload is tested in bench/gpu_validation.sh";
    }
    // Bit-for-bit comparisons need kernels without atomics-ordered reductions.
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  }
  void TearDown() override { at::globalContext().setDeterministicAlgorithms(false, false); }

  static RunConfig cuda_config(const std::string& policy, const std::string& offload) {
    RunConfig config = deep_config(policy, offload);
    config.device = "cuda";
    config.model.attention = AttentionKind::kMath;
    return config;
  }
};

TEST_F(HostOffloadOnCuda, RoundTripSurvivesReuseOfTheDeviceBlock) {
  const c10::Device device("cuda");
  auto store = make_host_offload_store(device);
  torch::Tensor original = torch::randn({256, 1024}, torch::TensorOptions().device(device));
  const torch::Tensor expected = original.cpu();
  const c10::Device resident = original.device();  // "cuda" resolved to a numbered device
  auto ticket = store->stash(original);
  original = torch::Tensor();  // the graph would drop it here; its block must not be reused early
  std::vector<torch::Tensor> scribble;
  for (int i = 0; i < 8; ++i) scribble.push_back(torch::full({256, 1024}, -1.0f, device));
  EXPECT_EQ(store->offloaded_peak_bytes(), 256 * 1024 * 4);
  store->begin_backward();
  const torch::Tensor back = ticket->fetch();
  EXPECT_EQ(back.device(), resident);
  EXPECT_TRUE(torch::equal(back.cpu(), expected));
}

TEST_F(HostOffloadOnCuda, GradientsAreBitIdenticalToNone) {
  RunConfig config = cuda_config("every:1", "host");
  config.accum = 2;
  const GradientCheckResult result = check_gradients(config);
  EXPECT_TRUE(result.identical) << result.max_abs_diff << " in " << result.worst_param;
  EXPECT_EQ(result.loss_diff, 0.0);
}

TEST_F(HostOffloadOnCuda, LossCurveEqualsCheckpointingAlone) {
  const RunSummary plain = Trainer(cuda_config("every:1", "none")).run();
  const RunSummary offloaded = Trainer(cuda_config("every:1", "host")).run();
  ASSERT_EQ(plain.steps.size(), offloaded.steps.size());
  for (std::size_t i = 0; i < plain.steps.size(); ++i) {
    EXPECT_EQ(offloaded.steps[i].loss, plain.steps[i].loss) << "step " << i;
  }
}

TEST_F(HostOffloadOnCuda, LowersPeakActivationByTheSavedInputs) {
  const RunSummary plain = Trainer(cuda_config("every:1", "none")).run();
  const RunSummary offloaded = Trainer(cuda_config("every:1", "host")).run();
  const ModelConfig shape = cuda_config("", "").model;
  const int64_t input_bytes = 8 * shape.seq_len * shape.d_model * 4;
  EXPECT_EQ(offloaded.offloaded_peak_bytes, 12 * input_bytes);
  EXPECT_LE(offloaded.peak_activation_bytes, plain.peak_activation_bytes - 6 * input_bytes)
      << "plain " << plain.peak_activation_bytes << ", offloaded "
      << offloaded.peak_activation_bytes;
}

}  // namespace
}  // namespace rematlab
