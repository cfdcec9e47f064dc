// Shared main for the suites: one LibTorch thread per test process, so `ctest -j2` uses both
// cores without oversubscribing them and results do not depend on the machine's core count.
// The default runs database (and anything else under the user's data folder) goes to a scratch
// folder of this process, never the user's, for the suites and the CLI children they start.
// Started with REMATLAB_TEST_DIST_WORKER=SPEC, the binary is one rank of a data-parallel test
// (test_dist.cpp) instead.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/posix_files.h"

namespace rematlab::testing {
int run_dist_test_worker(const std::string& spec_path);
}

int main(int argc, char** argv) {
  if (const char* spec = std::getenv("REMATLAB_TEST_DIST_WORKER")) {
    at::set_num_threads(1);
    return rematlab::testing::run_dist_test_worker(spec);
  }
  const std::string data_home = rematlab::files::join(
      rematlab::files::temp_directory(), "rematlab-test-data-" + std::to_string(::getpid()));
  ::setenv("XDG_DATA_HOME", data_home.c_str(), 1);
  ::unsetenv("REMATLAB_DB");
  at::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  rematlab::files::remove_tree(data_home);
  return result;
}
