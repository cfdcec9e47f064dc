#include <gtest/gtest.h>
#include <torch/torch.h>

#include "memory/memory_tracker.h"
#include "memory/process_memory.h"

namespace rematlab {
namespace {

TEST(MemoryTracker, CountsLiveTensorBytesExactly) {
  MemoryTracker tracker(c10::Device(c10::kCPU));
  const int64_t start = tracker.current_bytes();
  torch::Tensor floats = torch::empty({1000}, torch::kFloat);  // 4,000 bytes
  EXPECT_EQ(tracker.current_bytes() - start, 4000);
  {
    torch::Tensor doubles = torch::empty({50, 40}, torch::kDouble);  // 16,000 bytes
    EXPECT_EQ(tracker.current_bytes() - start, 20000);
  }
  EXPECT_EQ(tracker.current_bytes() - start, 4000);
  EXPECT_EQ(tracker.peak_bytes() - start, 20000);
  floats = torch::Tensor();
  EXPECT_EQ(tracker.current_bytes(), start);
  tracker.reset_peak();
  EXPECT_EQ(tracker.peak_bytes(), start);
}

TEST(MemoryTracker, ViewsAndInPlaceOpsAllocateNothing) {
  MemoryTracker tracker(c10::Device(c10::kCPU));
  torch::Tensor base = torch::zeros({256, 256});
  const int64_t after_base = tracker.current_bytes();
  torch::Tensor view = base.transpose(0, 1).narrow(0, 0, 10);
  base.add_(1.0);
  EXPECT_EQ(tracker.current_bytes(), after_base);
  torch::Tensor copy = view.contiguous();  // 10 × 256 floats
  EXPECT_EQ(tracker.current_bytes() - after_base, 10 * 256 * 4);
}

TEST(MemoryTracker, PeakSeesTransientsThatAreGoneAfterwards) {
  MemoryTracker tracker(c10::Device(c10::kCPU));
  torch::Tensor a = torch::ones({1000, 1000});  // 4,000,000 bytes
  tracker.reset_peak();
  const int64_t before = tracker.current_bytes();
  const double sum = (a * 2.0).sum().item<double>();  // a temporary of 4,000,000 bytes
  EXPECT_EQ(sum, 2e6);
  EXPECT_EQ(tracker.current_bytes(), before);
  EXPECT_GE(tracker.peak_bytes() - before, 4000000);
  EXPECT_LT(tracker.peak_bytes() - before, 4000000 + 4096);
}

TEST(MemoryTracker, TimelineRecordsEveryEventWithItsPhase) {
  MemoryTracker tracker(c10::Device(c10::kCPU));
  tracker.begin_timeline();
  {
    ScopedMemoryPhase forward(MemoryPhase::kForward);
    torch::Tensor x = torch::empty({100}, torch::kFloat);
    {
      ScopedMemoryPhase recompute(MemoryPhase::kRecompute);
      torch::Tensor y = torch::empty({200}, torch::kFloat);
    }
  }
  const auto timeline = tracker.end_timeline();
  ASSERT_GE(timeline.size(), 4u);
  bool saw_forward_alloc = false;
  bool saw_recompute_alloc = false;
  const int64_t start = timeline.front().bytes;
  for (const auto& point : timeline) {
    if (point.phase == MemoryPhase::kForward && point.bytes - start == 400)
      saw_forward_alloc = true;
    if (point.phase == MemoryPhase::kRecompute && point.bytes - start == 1200)
      saw_recompute_alloc = true;
  }
  EXPECT_TRUE(saw_forward_alloc);
  EXPECT_TRUE(saw_recompute_alloc);
  EXPECT_EQ(timeline.back().bytes, start);
  EXPECT_EQ(tracker.phase(), MemoryPhase::kIdle);
  for (std::size_t i = 1; i < timeline.size(); ++i)
    EXPECT_GE(timeline[i].time_ms, timeline[i - 1].time_ms);
}

TEST(MemoryTracker, SeesAllocationsOfAutogradBackward) {
  MemoryTracker tracker(c10::Device(c10::kCPU));
  torch::Tensor w = torch::randn({512, 512}, torch::requires_grad());
  const int64_t before = tracker.current_bytes();
  tracker.reset_peak();
  torch::Tensor loss = torch::matmul(w, w).sum();
  loss.backward();
  // The gradient of w (1 MiB) now lives; backward's temporaries were seen in the peak.
  EXPECT_EQ(tracker.current_bytes() - before, 512 * 512 * 4 + loss.nbytes());
  EXPECT_GE(tracker.peak_bytes() - before, 2 * 512 * 512 * 4);
}

TEST(ProcessMemory, ReportsResidentSet) {
  const ProcessMemory memory = read_process_memory();
  EXPECT_GT(memory.rss_bytes, 1 << 20);
  EXPECT_GE(memory.rss_peak_bytes, memory.rss_bytes);
}

}  // namespace
}  // namespace rematlab
