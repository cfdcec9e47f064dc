// Shared main for the suites: one LibTorch thread per test process, so `ctest -j2` uses both
// cores without oversubscribing them and results do not depend on the machine's core count.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  at::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
