// The CLI contract of ../shared/design/product.md, checked on the real binary.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/posix_files.h"
#include "run_json_contract.h"

namespace {

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Result cli(const std::string& arguments) {
  using rematlab::files::join;
  const std::string dir = rematlab::files::temp_directory();
  const std::string tag = std::to_string(::getpid());
  const std::string out = join(dir, "rematlab_cli_out_" + tag);
  const std::string err = join(dir, "rematlab_cli_err_" + tag);
  const std::string command =
      std::string(REMATLAB_CLI_PATH) + " " + arguments + " >" + out + " 2>" + err;
  const int status = std::system(command.c_str());
  Result result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = slurp(out);
  result.err = slurp(err);
  rematlab::files::remove_file(out);
  rematlab::files::remove_file(err);
  return result;
}

nlohmann::json last_line_json(const std::string& out) {
  std::string text = out;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return nlohmann::json::parse(text.substr(text.rfind('\n') + 1));
}

int count_lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

struct BadInput {
  std::string arguments;
  std::string must_mention;
};

class CliBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(CliBadInput, PrintsOneLineNamingTheFlagAndExits2) {
  const Result result = cli(GetParam().arguments);
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_EQ(count_lines(result.err), 1) << result.err;
  EXPECT_NE(result.err.find(GetParam().must_mention), std::string::npos) << result.err;
  EXPECT_EQ(result.err.find("terminate"), std::string::npos);
  EXPECT_EQ(result.err.find("Exception raised from"), std::string::npos);  // no LibTorch trace
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliBadInput,
    ::testing::Values(BadInput{"run --batch 0", "--batch"}, BadInput{"run --steps -3", "--steps"},
                      BadInput{"run --d-model 64 --heads 5", "--heads"},
                      BadInput{"run --preset huge", "--preset"},
                      BadInput{"run --data text:/no/such/file", "--data"},
                      BadInput{"run --frobnicate", "--frobnicate"},
                      BadInput{"run --precision fp16", "--precision"},
                      BadInput{"run --precision fp8", "--precision"},
                      BadInput{"run --device tpu", "--device"},
                      BadInput{"run --batch many", "--batch"},
                      BadInput{"run --budget lots", "--budget"},
                      BadInput{"run --checkpoint every:0", "every:0"},
                      BadInput{"check --checkpoint sublayer:1", "sublayer:1"},
                      BadInput{"run --offload disk", "--offload"},
                      BadInput{"run --checkpoint every:1 --offload host", "--offload"},
                      BadInput{"run --checkpoint every:1 --offload tape", "--offload"},
                      BadInput{"run --dropout 1.5", "--dropout"},
                      BadInput{"teleport", "teleport"}),
    [](const ::testing::TestParamInfo<BadInput>& param_info) {
      std::string name;
      for (char c : param_info.param.arguments) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

TEST(Cli, RunJsonIsTheLastLineAndHasEveryKey) {
  const Result result = cli("run --preset tiny --steps 3 --threads 1 --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  for (const char* key : rematlab::testing::kRunJsonKeys) {
    EXPECT_TRUE(json.contains(key)) << key;
  }
  EXPECT_EQ(json["status"], "ok");
  EXPECT_EQ(json["steps"], 3);
  EXPECT_EQ(json["params"], 120576);  // tiny: 2 blocks, d 64, seq 64, vocab 256, tied head
  EXPECT_NE(result.err.find("step 3/3"), std::string::npos);  // progress went to stderr
}

TEST(Cli, RunOverABudgetIsAResultNotAnError) {
  const Result result = cli("run --steps 5 --threads 1 --budget 1MiB --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(last_line_json(result.out)["status"], "oom");
}

TEST(Cli, TimelineComesWithPhases) {
  const Result result = cli("run --steps 2 --threads 1 --checkpoint every:1 --timeline --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json timeline = last_line_json(result.out)["timeline"];
  std::set<std::string> phases;
  for (const auto& point : timeline["points"]) phases.insert(point["phase"].get<std::string>());
  for (const char* phase : {"forward", "backward", "recompute", "optimizer"}) {
    EXPECT_TRUE(phases.count(phase)) << phase;
  }
}

TEST(Cli, CheckSaysIdenticalForSublayerWithDropout) {
  const Result result = cli("check --checkpoint sublayer:1,2 --dropout 0.1 --threads 1");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("\"identical\": true"), std::string::npos) << result.out;
  const Result json = cli("check --checkpoint selective --attention math --dropout 0.1 --json");
  const nlohmann::json verdict = last_line_json(json.out);
  for (const char* key : {"identical", "max_abs_diff", "max_rel_diff", "loss_diff", "params_compared"}) {
    EXPECT_TRUE(verdict.contains(key)) << key;
  }
  EXPECT_TRUE(verdict["identical"].get<bool>());
}

TEST(Cli, VersionNamesTheBlasAndThreads) {
  const Result result = cli("version --threads 2");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("BLAS (build)"), std::string::npos);
  EXPECT_NE(result.out.find("2 intra-op"), std::string::npos);
  EXPECT_NE(result.out.find("GFLOP/s"), std::string::npos);
}

TEST(Cli, EverySubcommandHasHelp) {
  for (const char* command : {"run", "check", "study", "version"}) {
    const Result result = cli(std::string(command) + " --help");
    EXPECT_EQ(result.exit_code, 0) << command;
    EXPECT_NE(result.out.find("--"), std::string::npos) << command;
  }
}

}  // namespace
