// The CLI contract of ../shared/design/product.md, checked on the real binary.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "cli_runner.h"
#include "common/posix_files.h"
#include "run_json_contract.h"
#include "store/run_store.h"
#include "store/schema.h"
#include "store/sqlite_db.h"

namespace {

using rematlab::testing::cli;
using rematlab::testing::count_lines;
using rematlab::testing::last_line_json;
using rematlab::testing::slurp;
using Result = rematlab::testing::CliResult;

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
    ::testing::Values(
        BadInput{"run --batch 0", "--batch"}, BadInput{"run --steps -3", "--steps"},
        BadInput{"run --d-model 64 --heads 5", "--heads"},
        BadInput{"run --preset huge", "--preset"},
        BadInput{"run --data text:/no/such/file", "--data"},
        BadInput{"run --frobnicate", "--frobnicate"},
        BadInput{"run --precision fp16", "--precision"},
        BadInput{"run --precision fp8", "--precision"}, BadInput{"run --device tpu", "--device"},
        BadInput{"run --batch many", "--batch"}, BadInput{"run --budget lots", "--budget"},
        BadInput{"run --checkpoint every:0", "every:0"},
        BadInput{"check --checkpoint sublayer:1", "sublayer:1"},
        BadInput{"run --offload disk", "--offload"},
        BadInput{"run --checkpoint every:1 --offload host", "--offload"},
        BadInput{"run --checkpoint every:1 --offload tape", "--offload"},
        BadInput{"run --dropout 1.5", "--dropout"}, BadInput{"run --loss-scale 0", "--loss-scale"},
        BadInput{"sweep --spec /no/such/spec.json", "--spec"},
        BadInput{"runs --db /no/such/runs.sqlite", "--db"},
        BadInput{"show 3 --db /no/such/runs.sqlite", "--db"},
        BadInput{"diagnose 3 --db /no/such/runs.sqlite", "--db"}, BadInput{"diagnose", "ID"},
        BadInput{"check --at-step 20 --steps 20", "--at-step"},
        BadInput{"export --csv /tmp/x.csv --db /no/such/runs.sqlite", "--db"},
        BadInput{"max-batch --preset tiny", "--budget"}, BadInput{"run --lr inf", "--lr"},
        BadInput{"run --peak-flops nan", "--peak-flops"},
        BadInput{"run --layers 100000000", "--layers"},
        BadInput{"run --seq-len 100000000", "--seq-len"},
        BadInput{"run --preset llama2-70b", "--preset"},
        BadInput{"max-batch --budget 1MiB --probe-steps 99999999999", "--probe-steps"},
        BadInput{"run --steps 99999999999999999999", "--steps"},
        BadInput{"run --steps 2000000000", "--steps"}, BadInput{"run --batch -1", "--batch"},
        BadInput{"run --threads 100000", "--threads"}, BadInput{"run --threads 2.5", "--threads"},
        BadInput{"run --data \"text:$(printf '\\377')\"", "--data"},
        BadInput{"run --db /no/such/dir/runs.sqlite", "--db"},
        BadInput{"run --db \"/tmp/$(printf '\\377').sqlite\"", "--db"},
        BadInput{"run --checkpoint every:1 --offload disk:/etc/passwd/x", "--offload"},
        BadInput{"runs --status bogus --db /no/such/runs.sqlite", "--status"},
        BadInput{"run --preset llama-tiny --rope-theta 0.5", "--rope-theta"},
        BadInput{"run --preset tiny --rope-theta 500000", "--rope-theta"},
        BadInput{"run --preset llama-tiny --sliding-window -1", "--sliding-window"},
        BadInput{"run --preset llama-tiny --sliding-window 999999999", "--sliding-window"},
        BadInput{"plan --preset tiny", "--budget"},
        BadInput{"plan --preset tiny --ladder 1", "--ladder"},
        BadInput{"plan --preset tiny --budget 1MiB --repeats 0", "--repeats"},
        BadInput{"profile --preset tiny --repeats 0", "--repeats"},
        BadInput{"run --checkpoint segments:a0,m9", "m9 is past"},
        BadInput{"run --checkpoint plan:lots", "plan:lots"},
        BadInput{"run --nproc 2 --shard parameters --precision bf16", "--shard"},
        BadInput{"teleport", "teleport"}),
    [](const ::testing::TestParamInfo<BadInput>& param_info) {
      std::string name;
      for (char c : param_info.param.arguments)
        name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
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

TEST(Cli, GpuSwitchesAreAcceptedOnCpuAndShowInTheJson) {
  const Result result = cli("run --steps 2 --threads 1 --tf32 --deterministic --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  EXPECT_EQ(json["status"], "ok");
  EXPECT_EQ(json["reserved_bytes"], 0);  // CUDA only
  EXPECT_EQ(json["device_used_bytes"], 0);
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
  for (const char* key :
       {"identical", "max_abs_diff", "max_rel_diff", "loss_diff", "params_compared"}) {
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
  for (const char* command : {"run", "check", "study", "sweep", "max-batch", "runs", "show",
                              "compare", "export", "version"}) {
    const Result result = cli(std::string(command) + " --help");
    EXPECT_EQ(result.exit_code, 0) << command;
    EXPECT_NE(result.out.find("--"), std::string::npos) << command;
  }
}

// A scratch directory for database and spec files, removed with its contents.
class Scratch {
 public:
  Scratch()
      : path_(rematlab::files::join(
            rematlab::files::temp_directory(),
            "rematlab-cli-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++))) {
    rematlab::files::make_directories(path_);
  }
  ~Scratch() { rematlab::files::remove_tree(path_); }
  std::string file(const std::string& name) const { return rematlab::files::join(path_, name); }
  const std::string& path() const { return path_; }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name)) << text;
    return file(name);
  }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

TEST(CliSweep, MalformedSpecsAreRejectedBeforeAnythingRuns) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  const std::vector<std::pair<std::string, std::string>> specs = {
      {R"({"base": {"preset": "tiny"}, "colour": "red"})", "spec: colour"},
      {R"({"base": {"steps": "many"}})", "spec: base.steps"},
      {R"({"axes": {"checkpoint": []}})", "spec: axes.checkpoint"},
      {R"({"axes": {"checkpoint": ["none", "evry:2"]}})", "spec: axes.checkpoint[1]"},
      {R"({"axes": {"checkpoint": ["none"]}, )", "not valid JSON"},
  };
  for (const auto& [text, must_mention] : specs) {
    const std::string spec = scratch.write("spec.json", text);
    const Result result = cli("sweep --spec " + spec + " --db " + db);
    EXPECT_EQ(result.exit_code, 2) << text;
    EXPECT_EQ(count_lines(result.err), 1) << result.err;
    EXPECT_NE(result.err.find(must_mention), std::string::npos) << result.err;
    EXPECT_FALSE(rematlab::files::exists(db)) << "a database was created for a bad spec";
  }
}

TEST(CliSweep, TheModelFamilyCanBeAnAxis) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  const std::string spec = scratch.write("spec.json", R"({"name": "families",
      "base": {"preset": "tiny", "steps": 2, "threads": 1},
      "axes": {"arch": ["gpt", "llama"]}})");
  const Result result = cli("sweep --spec " + spec + " --db " + db + " --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  rematlab::RunStore store(db, rematlab::StoreAccess::kReadOnly, false);
  const auto runs = store.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].config.model.family, rematlab::ModelFamily::kGpt);
  EXPECT_EQ(runs[1].config.model.family, rematlab::ModelFamily::kLlama);
  EXPECT_EQ(runs[1].result.params, runs[1].config.model.parameter_count());
  EXPECT_NE(runs[1].result.params, runs[0].result.params);
  for (const auto& run : runs) EXPECT_EQ(run.status, rematlab::RunStatus::kOk);
}

class CliLlamaCheck : public ::testing::TestWithParam<std::string> {};

// The Done-when of the Llama issue, as a user types it.
TEST_P(CliLlamaCheck, EveryPolicyIsIdenticalToNoneWithDropout) {
  const Result result = cli("check --preset llama-tiny --threads 1 --checkpoint " + GetParam() +
                            " --dropout 0.1 --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(last_line_json(result.out).at("identical").get<bool>()) << result.out;
}

INSTANTIATE_TEST_SUITE_P(Policies, CliLlamaCheck,
                         ::testing::Values("every:1", "every:2", "sublayer:1,2", "selective",
                                           "schedule:0=1,0.5=2"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

TEST(CliSweep, RunsRecordsAndPrintsTheTableWithProgressAndEta) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  const std::string spec = scratch.write("spec.json", R"({"name": "two",
      "base": {"preset": "tiny", "steps": 3, "threads": 1},
      "axes": {"checkpoint": ["none", "every:1"]}})");
  const Result result = cli("sweep --spec " + spec + " --db " + db + " --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("[run 2/2 checkpoint=every:1"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("sweep ETA"), std::string::npos) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  ASSERT_EQ(json.at("runs").size(), 2u);
  EXPECT_EQ(json.at("runs")[1].at("checkpoint"), "every:1");
  rematlab::RunStore store(db, rematlab::StoreAccess::kReadOnly, false);
  EXPECT_EQ(store.runs().size(), 2u);
  EXPECT_EQ(store.experiments().at(0).name, "two");
}

// The contract's strongest promise: kill -9 in the middle of a sweep loses at most about the
// last second of steps, and the database opens cleanly, the run marked interrupted.
TEST(CliSweep, KillNineLosesAtMostTheLastSecondOfSteps) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  const std::string log = scratch.file("progress.log");
  const std::string spec = scratch.write("spec.json", R"({
      "base": {"preset": "tiny", "steps": 100000, "threads": 1},
      "axes": {"checkpoint": ["every:1", "none"]}})");
  const pid_t child = ::fork();
  if (child == 0) {
    std::freopen(log.c_str(), "w", stderr);
    std::freopen("/dev/null", "w", stdout);
    ::execl(REMATLAB_CLI_PATH, REMATLAB_CLI_PATH, "sweep", "--spec", spec.c_str(), "--db",
            db.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_GT(child, 0);
  int64_t committed = 0;
  std::string last_error;
  int status = 0;
  bool ended = false;  // on its own: then it failed, and its log says why
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (committed < 100 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (::waitpid(child, &status, WNOHANG) == child) {
      ended = true;
      break;
    }
    if (!rematlab::files::exists(db)) continue;
    try {
      rematlab::RunStore store(db, rematlab::StoreAccess::kReadOnly, false);
      const auto runs = store.runs();
      committed = runs.empty() ? 0 : runs[0].steps_recorded;
    } catch (const std::exception& error) {
      // The file exists before the sweep has written its schema: not a database yet.
      last_error = error.what();
    }
  }
  if (!ended) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
  }
  ASSERT_FALSE(ended) << "the sweep ended by itself: " << slurp(log);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_GE(committed, 100) << "the sweep did not get going; the last read failed with: "
                            << last_error << "\nits log: " << slurp(log);

  // What the process had finished (its progress log) against what the database kept.
  const std::string progress = slurp(log);
  int64_t printed = 0;
  std::vector<double> step_ms;
  const std::regex line(R"(step (\d+)/\d+ .* ([0-9.]+) ms)");
  for (auto it = std::sregex_iterator(progress.begin(), progress.end(), line);
       it != std::sregex_iterator(); ++it) {
    printed = std::stoll((*it)[1]);
    step_ms.push_back(std::stod((*it)[2]));
  }
  rematlab::RunStore store(db, rematlab::StoreAccess::kReadWrite, false);
  EXPECT_EQ(store.recovered_runs(), 1);
  EXPECT_EQ(store.integrity_check(), "ok");
  const auto runs = store.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, rematlab::RunStatus::kInterrupted);
  const auto steps = store.steps(runs[0].id);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.back().step + 1, static_cast<int64_t>(steps.size()));  // no holes
  std::sort(step_ms.begin(), step_ms.end());
  const double median_ms = step_ms[step_ms.size() / 2];
  const double lost_ms =
      static_cast<double>(printed - static_cast<int64_t>(steps.size())) * median_ms;
  EXPECT_LE(lost_ms, 1500.0) << printed << " steps printed, " << steps.size() << " kept, "
                             << median_ms << " ms each";
}

TEST(CliReports, ExportMatchesCompareAndQuotesNames) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  const std::string awkward = "every:1, \"the\" good one";
  ASSERT_EQ(cli("run --preset tiny --steps 3 --threads 1 --db " + db).exit_code, 0);
  ASSERT_EQ(cli("run --preset tiny --steps 3 --threads 1 --checkpoint every:1 --db " + db +
                " --name '" + awkward + "' --json")
                .exit_code,
            0);
  const Result runs = cli("runs --db " + db);
  EXPECT_NE(runs.out.find(awkward), std::string::npos) << runs.out;

  const Result compare = cli("compare 1 2 --db " + db + " --json");
  ASSERT_EQ(compare.exit_code, 0) << compare.err;
  const std::string csv = scratch.file("runs.csv");
  ASSERT_EQ(cli("export --db " + db + " --csv " + csv).exit_code, 0);
  // Read back by Python's csv module, which follows RFC 4180 like spreadsheets and pandas do.
  const std::string reader =
      scratch.write("read.py",
                    "import csv, json, sys\n"
                    "rows = list(csv.DictReader(open(sys.argv[1], newline='')))\n"
                    "print(json.dumps(rows))\n");
  const std::string parsed_file = scratch.file("parsed.json");
  ASSERT_EQ(std::system(("python3 " + reader + " " + csv + " > " + parsed_file).c_str()), 0);
  const nlohmann::json rows = nlohmann::json::parse(slurp(parsed_file));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].at("name"), awkward);
  EXPECT_EQ(rows[1].at("checkpoint"), "every:1");

  int metrics_checked = 0;
  const nlohmann::json comparison = last_line_json(compare.out);
  for (const auto& row : comparison.at("rows")) {
    if (!row.at("metric").get<bool>()) continue;
    const std::string field = row.at("field");
    for (int run = 0; run < 2; ++run) {
      ASSERT_TRUE(rows[run].contains(field)) << field;
      EXPECT_EQ(std::stod(rows[run].at(field).get<std::string>()),
                row.at("values")[run].get<double>())
          << field << " of run " << run + 1;
    }
    ++metrics_checked;
  }
  EXPECT_GE(metrics_checked, 10);

  const std::string steps_csv = scratch.file("steps.csv");
  ASSERT_EQ(cli("export --db " + db + " --csv " + steps_csv + " --steps --runs 2").exit_code, 0);
  EXPECT_EQ(count_lines(slurp(steps_csv)), 1 + 3);  // the header and every step
}

// Root writes anywhere; to see a folder's or file's write protection the CLI runs without that
// privilege (util-linux's setpriv drops it), as any user would.
Result cli_unprivileged(const std::string& arguments) {
  if (::geteuid() != 0) return cli(arguments);
  return rematlab::testing::cli_through("setpriv --bounding-set=-dac_override,-dac_read_search",
                                        arguments);
}

void expect_one_line_refusal(const Result& result, const std::string& must_mention,
                             const std::string& what) {
  EXPECT_EQ(result.exit_code, 2) << what << ": " << result.err;
  EXPECT_EQ(count_lines(result.err), 1) << what << ": " << result.err;
  EXPECT_NE(result.err.find(must_mention), std::string::npos) << what << ": " << result.err;
}

// Bad input that needs files to show: one line, exit 2, nothing run, the database unchanged.
TEST(CliBadInputFiles, EachIsRefusedBeforeAnythingRunsAndTheDatabaseIsUntouched) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  ASSERT_EQ(cli("run --preset tiny --steps 2 --threads 1 --db " + db).exit_code, 0);
  const std::string before = slurp(db);
  const std::string regular_file = scratch.write("file.txt", "x");
  const std::vector<std::pair<std::string, std::string>> specs = {
      {R"({"base": {"preset": "tiny", "data": "text:/no/such/corpus.txt"}})", "spec: base.data"},
      {R"({"base": {"preset": "tiny", "checkpoint": "every:1",
                    "offload": "disk:)" +
           regular_file + R"(/sub"}})",
       "spec: base.offload"},
      {R"({"base": {"preset": "tiny", "threads": 100000}})", "spec: base.threads"},
      {R"({"base": {"preset": "tiny", "steps": 18446744073709551615}})", "spec: base.steps"},
      {R"({"base": {"preset": "tiny"}, "repeats": 1000000000000})", "spec: axes"},
      {R"({"base": {"preset": "tiny"}, "axes": {"seed": [)" +
           [] {
             std::string seeds;
             for (int i = 0; i < 200; ++i) seeds += (i ? "," : "") + std::to_string(i);
             return seeds;
           }() +
           R"(], "batch": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,
                              21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,
                              41,42,43,44,45,46,47,48,49,50,51]}})",
       "more than 10000 runs"},
  };
  for (const auto& [text, must_mention] : specs) {
    const std::string spec = scratch.write("spec.json", text);
    expect_one_line_refusal(cli("sweep --spec " + spec + " --db " + db), must_mention, text);
    EXPECT_EQ(slurp(db), before) << text;
  }
  expect_one_line_refusal(
      cli("export --db " + db + " --csv \"" + scratch.path() + "/$(printf '\\377').csv\""), "--csv",
      "a CSV path that is not UTF-8");
  expect_one_line_refusal(cli("export --db " + db + " --csv " + scratch.file("no/such/dir/x.csv")),
                          "--csv", "a CSV in a missing folder");
  EXPECT_EQ(slurp(db), before);
  for (const std::string& name : rematlab::files::list(scratch.path())) {
    EXPECT_EQ(name.find("tmp"), std::string::npos) << "a temporary file was left: " << name;
  }
}

TEST(CliBadInputFiles, ALockedDatabaseSaysLockedAndStaysAsItWas) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  ASSERT_EQ(cli("run --preset tiny --steps 2 --threads 1 --db " + db).exit_code, 0);
  const std::string before = slurp(db);
  {
    rematlab::Database holder(db, rematlab::Database::Mode::kReadWrite);
    holder.exec("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE;");
    expect_one_line_refusal(cli("run --preset tiny --steps 2 --db " + db), "locked", "run");
    expect_one_line_refusal(cli("runs --db " + db), "locked", "runs");
    holder.exec("COMMIT");
  }
  EXPECT_EQ(slurp(db), before);
}

TEST(CliBadInputFiles, WriteProtectedPlacesAreNamedAndLeftAlone) {
  Scratch scratch;
  const std::string folder = scratch.file("locked-folder");
  ASSERT_EQ(rematlab::files::make_directories(folder), "");
  ASSERT_EQ(::chmod(folder.c_str(), 0555), 0);
  expect_one_line_refusal(
      cli_unprivileged("run --preset tiny --steps 2 --db " + folder + "/new.sqlite"),
      "not writable", "a new database in a read-only folder");
  EXPECT_TRUE(rematlab::files::list(folder).empty());
  ::chmod(folder.c_str(), 0755);

  const std::string db = scratch.file("runs.sqlite");
  ASSERT_EQ(cli("run --preset tiny --steps 2 --threads 1 --db " + db).exit_code, 0);
  ASSERT_EQ(::chmod(db.c_str(), 0444), 0);
  const std::string before = slurp(db);
  expect_one_line_refusal(cli_unprivileged("run --preset tiny --steps 2 --db " + db),
                          "write-protected", "a run into a write-protected database");
  // Reading it is fine: reports never write.
  const Result listed = cli_unprivileged("runs --db " + db + " --json");
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_EQ(last_line_json(listed.out).at("runs").size(), 1u);
  EXPECT_EQ(slurp(db), before);
}

TEST(CliBadInputFiles, AnExportOntoTheDatabaseItselfIsRefused) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  ASSERT_EQ(cli("run --preset tiny --steps 2 --threads 1 --db " + db).exit_code, 0);
  const std::string before = slurp(db);
  expect_one_line_refusal(cli("export --db " + db + " --csv " + db), "--csv",
                          "the database as the CSV");
  EXPECT_EQ(slurp(db), before);
}

// Plain `disk` offloads under $TMPDIR: a folder there that cannot be written is found out before
// the sweep records anything, not by every run failing.
TEST(CliBadInputFiles, AnOffloadFolderThatCannotBeMadeStopsTheSweepBeforeItRuns) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  ASSERT_EQ(cli("run --preset tiny --steps 2 --threads 1 --db " + db).exit_code, 0);
  const std::string before = slurp(db);
  const std::string tmp = scratch.file("read-only-tmp");
  ASSERT_EQ(rematlab::files::make_directories(tmp), "");
  ASSERT_EQ(::chmod(tmp.c_str(), 0555), 0);
  const std::string spec = scratch.write("spec.json", R"({"base": {"preset": "tiny", "steps": 2,
      "checkpoint": "every:1", "offload": "disk"}})");
  const std::string privilege =
      ::geteuid() == 0 ? "setpriv --bounding-set=-dac_override,-dac_read_search" : "";
  expect_one_line_refusal(rematlab::testing::cli_through("env TMPDIR=" + tmp + " " + privilege,
                                                         "sweep --spec " + spec + " --db " + db),
                          "--offload", "plain disk offload under a read-only $TMPDIR");
  EXPECT_EQ(slurp(db), before);
  ::chmod(tmp.c_str(), 0755);
}

// Reports never migrate: an older database is refused with the command that upgrades it.
TEST(CliReports, AnOlderDatabaseIsUpgradedOnlyWhenAsked) {
  Scratch scratch;
  const std::string db = scratch.file("old.sqlite");
  rematlab::create_store_database_at_version(db, rematlab::kStoreSchemaVersion - 1);
  const std::string before = slurp(db);
  expect_one_line_refusal(cli("runs --db " + db), "upgrade --db", "a report on an older schema");
  EXPECT_EQ(slurp(db), before);
  const Result upgraded = cli("upgrade --db " + db);
  EXPECT_EQ(upgraded.exit_code, 0) << upgraded.err;
  EXPECT_EQ(cli("runs --db " + db).exit_code, 0);
}

TEST(CliReports, UpgradeRefusesAnEmptyFileInsteadOfMakingADatabaseOfIt) {
  Scratch scratch;
  const std::string db = scratch.file("typo.sqlite");
  std::ofstream(db).flush();
  expect_one_line_refusal(cli("upgrade --db " + db), "--db", "upgrade of an empty file");
  EXPECT_EQ(slurp(db), "");
  const std::string absent = scratch.file("absent.sqlite");
  expect_one_line_refusal(cli("upgrade --db " + absent), "no database",
                          "upgrade of a missing file");
  EXPECT_NE(::access(absent.c_str(), F_OK), 0) << "upgrade made a database where there was none";
}

TEST(Cli, RopeThetaReachesTheModelAndItsRecord) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  const std::string run = "run --preset llama-tiny --steps 2 --threads 1 --json --db " + db;
  const Result preset = cli(run);
  const Result llama3 = cli(run + " --rope-theta 500000");
  ASSERT_EQ(preset.exit_code, 0) << preset.err;
  ASSERT_EQ(llama3.exit_code, 0) << llama3.err;
  // Other rotary frequencies, other attention scores: the same seed trains to another loss.
  EXPECT_NE(last_line_json(preset.out)["final_loss"], last_line_json(llama3.out)["final_loss"]);
  rematlab::RunStore store(db, rematlab::StoreAccess::kReadOnly, false);
  EXPECT_EQ(store.run(1).config.model.rope_theta, 10000.0);
  EXPECT_EQ(store.run(2).config.model.rope_theta, 500000.0);
}

// A window shorter than the sequence changes what attention sees (another loss), is recorded and
// read back, and a preset's own window (mistral-7b's 4096) is recorded too; 0 turns it off.
TEST(Cli, ASlidingWindowReachesTheModelAndItsRecord) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  const std::string run = "run --preset llama-tiny --steps 2 --threads 1 --json --db " + db;
  const Result whole = cli(run);
  const Result windowed = cli(run + " --sliding-window 16");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  ASSERT_EQ(windowed.exit_code, 0) << windowed.err;
  EXPECT_NE(last_line_json(whole.out)["final_loss"], last_line_json(windowed.out)["final_loss"]);
  const Result estimate = cli("estimate --preset mistral-7b --batch 1 --json");
  ASSERT_EQ(estimate.exit_code, 0) << estimate.err;
  EXPECT_EQ(last_line_json(estimate.out)["sliding_window"], 4096);
  const Result off = cli("estimate --preset mistral-7b --batch 1 --sliding-window 0 --json");
  EXPECT_EQ(last_line_json(off.out)["sliding_window"], 0);
  // Full attention forms more scores: more model FLOPs.
  EXPECT_GT(last_line_json(off.out)["model_flops"].get<double>(),
            last_line_json(estimate.out)["model_flops"].get<double>());
  rematlab::RunStore store(db, rematlab::StoreAccess::kReadOnly, false);
  EXPECT_EQ(store.run(1).config.model.sliding_window, 0);
  EXPECT_EQ(store.run(2).config.model.sliding_window, 16);
  EXPECT_TRUE(store.run(2).unread_config_fields.empty());
}

TEST(CliPlan, ALadderRunsFromTheSmallestFeasibleBudgetToNone) {
  const Result result =
      cli("plan --preset tiny --batch 8 --threads 1 --repeats 1 --ladder 3 --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  const nlohmann::json& ladder = json["ladder"];
  ASSERT_EQ(ladder.size(), 3u);
  EXPECT_EQ(ladder[0]["budget_bytes"], json["smallest_feasible_bytes"]);
  for (const auto& rung : ladder) {
    ASSERT_TRUE(rung["plan"].is_string()) << rung.dump();
    EXPECT_LE(rung["predicted_peak_bytes"].get<int64_t>(), rung["budget_bytes"].get<int64_t>());
  }
  EXPECT_EQ(ladder[2]["plan"], "none");  // at none's own peak nothing need be recomputed
  // The smallest budget pays for its memory in recomputation; none pays nothing.
  EXPECT_GT(ladder[0]["predicted_recompute_ms"].get<double>(), 0.0);
  EXPECT_EQ(ladder[2]["predicted_recompute_ms"].get<double>(), 0.0);
}

TEST(CliPlan, ABudgetNoPlanFitsNamesTheSmallestThatDoes) {
  const Result result = cli("plan --preset tiny --threads 1 --repeats 1 --budget 1KiB --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  EXPECT_TRUE(json["plan"].is_null());
  EXPECT_GT(json["smallest_feasible_bytes"].get<int64_t>(), 1024);
  EXPECT_NE(result.out.find("the smallest budget one fits is"), std::string::npos) << result.out;
}

TEST(CliPlan, ARunNoPlanFitsIsAnOomResultWithoutFiguresItNeverMeasured) {
  const Result run = cli("run --preset tiny --threads 1 --steps 3 --checkpoint plan:1KiB");
  ASSERT_EQ(run.exit_code, 0) << run.err;  // a result, not a failure
  EXPECT_NE(run.out.find("oom (no checkpoint plan fits 1.00 KiB"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("peak activation"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("tokens/s"), std::string::npos) << run.out;
}

TEST(CliPlan, APlannedRunRecordsItsBudgetAndPredictionBesideItsMeasurement) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  const Result run =
      cli("run --preset tiny --batch 8 --threads 1 --steps 2 --checkpoint plan:3MiB "
          "--json --db " +
          db);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json json = last_line_json(run.out);
  EXPECT_EQ(json["plan"]["budget_bytes"], 3 << 20);
  EXPECT_EQ(json["checkpoint"], json["plan"]["chosen"]);
  rematlab::RunStore store(db, rematlab::StoreAccess::kReadOnly, false);
  const rematlab::RunRecord record = store.run(1);
  EXPECT_EQ(record.name, "plan:3MiB b8");  // what was asked, as the user wrote it
  EXPECT_EQ(record.config.checkpoint, json["checkpoint"]);
  ASSERT_TRUE(record.request.plan.has_value());
  EXPECT_EQ(record.request.plan->budget_bytes, 3 << 20);
  EXPECT_EQ(record.request.plan->predicted_peak_bytes, json["plan"]["predicted_peak_bytes"]);
  const std::string csv = scratch.file("runs.csv");
  ASSERT_EQ(cli("export --csv " + csv + " --db " + db).exit_code, 0);
  std::ifstream in(csv);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  EXPECT_NE(header.find("request_plan_predicted_peak_bytes"), std::string::npos);
  EXPECT_NE(row.find(std::to_string(record.request.plan->predicted_peak_bytes)), std::string::npos)
      << row;
}

TEST(CliPlan, AConfigurationProfiledOnceIsPlannedFromTheDatabaseAfterwards) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  const std::string shape = " --preset tiny --batch 8 --threads 1";
  const std::string run = "run" + shape + " --steps 2 --checkpoint plan:3MiB --json --db " + db;
  const Result first = cli(run);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const nlohmann::json measured = last_line_json(first.out)["plan"];
  EXPECT_NE(measured["profile_source"].get<std::string>().find("(kept now)"), std::string::npos)
      << measured.dump();
  const Result second = cli(run);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const nlohmann::json reused = last_line_json(second.out)["plan"];
  EXPECT_EQ(reused["profile_source"].get<std::string>().rfind("runs database: measured ", 0), 0u)
      << reused.dump();
  EXPECT_EQ(reused["profile_source"].get<std::string>().find("(kept now)"), std::string::npos);
  EXPECT_EQ(reused["chosen"], measured["chosen"]) << "one profile, one plan";
  EXPECT_EQ(reused["predicted_peak_bytes"], measured["predicted_peak_bytes"]);
  // `plan` and `profile` read the same kept costs for the same shape.
  const Result planned = cli("plan" + shape + " --budget 3MiB --json --db " + db);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const nlohmann::json plan = last_line_json(planned.out);
  EXPECT_EQ(plan["plan"], measured["chosen"]);
  EXPECT_EQ(plan["profile_source"], reused["profile_source"]);
  const Result profiled = cli("profile" + shape + " --json --db " + db);
  ASSERT_EQ(profiled.exit_code, 0) << profiled.err;
  EXPECT_EQ(last_line_json(profiled.out)["profile_source"], reused["profile_source"]);
  EXPECT_EQ(cli("profile" + shape + " --reprofile").exit_code, 2) << "--reprofile needs --db";
}

TEST(Cli, CheckExitsThreeWhenTheGradientsDiffer) {
  const Result same =
      cli("check --preset tiny --threads 1 --checkpoint every:1 --dropout 0.1 --json");
  EXPECT_EQ(same.exit_code, 0) << same.err;
  const Result differ =
      cli("check --preset tiny --threads 1 --checkpoint every:1 --dropout 0.1 "
          "--reference-seed 7 --json");
  EXPECT_EQ(differ.exit_code, 3) << differ.err;
  EXPECT_FALSE(last_line_json(differ.out).at("identical").get<bool>());
}

// The CSV reaches the disk before it replaces anything: fsync of the temporary, then the rename,
// then an fsync of the folder (seen with strace).
TEST(CliReports, ExportFlushesTheFileBeforeTheRename) {
  if (std::system("command -v strace >/dev/null 2>&1") != 0) {
    GTEST_SKIP()
        << "strace is not installed (scripts/lib/setup.sh installs it; the GPU machine lacks it)";
  }
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  ASSERT_EQ(cli("run --preset tiny --steps 2 --threads 1 --db " + db).exit_code, 0);
  const std::string trace = scratch.file("trace.txt");
  const std::string csv = scratch.file("out.csv");
  const Result result = rematlab::testing::cli_through(
      "strace -f -qq -e trace=fsync,rename,renameat,renameat2 -o " + trace,
      "export --db " + db + " --csv " + csv);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string calls = slurp(trace);
  const auto first_fsync = calls.find("fsync(");
  const auto rename = calls.find("out.csv");
  ASSERT_NE(first_fsync, std::string::npos) << calls;
  ASSERT_NE(rename, std::string::npos) << calls;
  EXPECT_LT(first_fsync, rename) << calls;
  EXPECT_NE(calls.find("fsync(", rename), std::string::npos)
      << "the folder is not flushed: " << calls;
}

// What `scripts/run --headless` shows, the export shows too: the batch each strategy trained at.
TEST(CliReports, MaxBatchRunsExportTheBatchTheyTrainedAt) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  const std::string spec = scratch.write("spec.json", R"({"name": "search",
      "base": {"preset": "tiny", "steps": 2, "threads": 1, "batch": 8},
      "axes": {"checkpoint": ["none", "every:1"]},
      "max_batch": {"budget": "12MiB", "limit": 256}})");
  const Result sweep = cli("sweep --spec " + spec + " --db " + db + " --json");
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  const nlohmann::json runs = last_line_json(sweep.out).at("runs");
  const std::string csv = scratch.file("runs.csv");
  ASSERT_EQ(cli("export --db " + db + " --csv " + csv).exit_code, 0);
  const std::string reader =
      scratch.write("read.py",
                    "import csv, json, sys\n"
                    "print(json.dumps(list(csv.DictReader(open(sys.argv[1], newline='')))))\n");
  const std::string parsed = scratch.file("parsed.json");
  ASSERT_EQ(std::system(("python3 " + reader + " " + csv + " > " + parsed).c_str()), 0);
  const nlohmann::json rows = nlohmann::json::parse(slurp(parsed));
  ASSERT_EQ(rows.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const int64_t found = runs[i].at("max_batch");
    ASSERT_GT(found, 1);
    EXPECT_NE(found, 8);  // the spec's batch is not what it trained at
    EXPECT_EQ(rows[i].at("batch"), std::to_string(found));
    EXPECT_EQ(rows[i].at("request_max_batch_budget_bytes"), std::to_string(12 << 20));
    EXPECT_EQ(rows[i].at("steps_completed"), "2");
  }
  EXPECT_NE(rows[0].at("batch"), rows[1].at("batch"));
}

TEST(CliReports, MaxBatchFindsTheBatchThatFits) {
  const Result result =
      cli("max-batch --preset tiny --threads 1 --checkpoint every:1 "
          "--budget 12MiB --limit 256 --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  const int64_t best = json.at("max_batch");
  ASSERT_GT(best, 1);
  EXPECT_LE(json.at("peak_bytes").get<int64_t>(), json.at("budget_bytes").get<int64_t>());
  bool above_failed = false;
  for (const auto& trial : json.at("trials")) {
    if (trial.at("batch") == best + 1) above_failed = trial.at("status") == "oom";
  }
  EXPECT_TRUE(above_failed) << json.dump();
}

// One documented default for the CLI and the window: $REMATLAB_DB, else
// $XDG_DATA_HOME/rematlab/rematlab.sqlite. A sweep without --db lands where the window looks
// (core's default_database_path, which the window opens), never in ./rematlab.sqlite.
TEST(CliDefaults, WithoutDbRunsLandInTheWindowsDatabase) {
  Scratch scratch;
  const std::string data = scratch.file("data");
  const std::string spec = scratch.write(
      "spec.json",
      R"({"name": "default db", "base": {"preset": "tiny", "steps": 2, "threads": 1}})");
  const std::string in_cwd = rematlab::files::join(scratch.path(), "rematlab.sqlite");
  const std::string env = "cd " + scratch.path() + " && env -u REMATLAB_DB XDG_DATA_HOME=" + data;
  const Result result = rematlab::testing::cli_through(env, "sweep --spec " + spec + " --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_FALSE(rematlab::files::exists(in_cwd)) << "a database was made in the working folder";

  // What the window opens with the same environment.
  const char* saved = std::getenv("XDG_DATA_HOME");
  const std::string saved_value = saved ? saved : "";
  ::setenv("XDG_DATA_HOME", data.c_str(), 1);
  const std::string window_default = rematlab::default_database_path();
  ::setenv("XDG_DATA_HOME", saved_value.c_str(), 1);
  EXPECT_EQ(window_default, rematlab::files::join(data, "rematlab/rematlab.sqlite"));
  ASSERT_TRUE(rematlab::files::exists(window_default));
  {
    rematlab::RunStore store(window_default, rematlab::StoreAccess::kReadOnly, false);
    ASSERT_EQ(store.runs().size(), 1u);
    EXPECT_EQ(store.runs()[0].experiment, "default db");
  }
  const Result listed = rematlab::testing::cli_through(env, "runs");
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.out.find("default db"), std::string::npos) << listed.out;

  // REMATLAB_DB chooses another file, for both.
  const std::string chosen = scratch.file("chosen.sqlite");
  const Result elsewhere = rematlab::testing::cli_through(
      "REMATLAB_DB=" + chosen + " XDG_DATA_HOME=" + data, "sweep --spec " + spec + " --json");
  ASSERT_EQ(elsewhere.exit_code, 0) << elsewhere.err;
  rematlab::RunStore chosen_store(chosen, rematlab::StoreAccess::kReadOnly, false);
  EXPECT_EQ(chosen_store.runs().size(), 1u);
  rematlab::RunStore store(window_default, rematlab::StoreAccess::kReadOnly, false);
  EXPECT_EQ(store.runs().size(), 1u);  // the default was left alone
}

TEST(Cli, DiagnoseReportsFindingsAsTextAndJsonAndRefusesAnUnknownRun) {
  Scratch scratch;
  const std::string db = scratch.file("runs.sqlite");
  const Result run =
      cli("run --preset tiny --steps 10 --threads 1 --peak-flops 1e12 --lr 1e6 "
          "--db " +
          db + " --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const int64_t id = last_line_json(run.out).at("run_id").get<int64_t>();
  // lr 1e6 with weight decay multiplies the weights by 1 - 1e4 each step: fp32 overflows fast.
  const Result json = cli("diagnose " + std::to_string(id) + " --db " + db + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json report = last_line_json(json.out);
  EXPECT_EQ(report.at("run_id"), id);
  ASSERT_TRUE(report.at("findings").is_array());
  ASSERT_FALSE(report.at("findings").empty()) << report.dump();
  const nlohmann::json& finding = report.at("findings")[0];
  EXPECT_EQ(finding.at("kind"), "diverged");
  for (const char* key : {"title", "evidence", "next_step"}) EXPECT_TRUE(finding.contains(key));

  const Result text = cli("diagnose " + std::to_string(id) + " --db " + db + " --no-replay");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("[diverged]"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("next: "), std::string::npos) << text.out;

  for (const std::string bad : {"999", "0", "-4", "abc"}) {
    const Result refused = cli("diagnose " + bad + " --db " + db);
    EXPECT_EQ(refused.exit_code, 2) << bad << ": " << refused.err;
    EXPECT_EQ(count_lines(refused.err), 1) << refused.err;
    EXPECT_TRUE(refused.out.empty()) << refused.out;
  }
}

}  // namespace
