// Hostile input, end to end through the real rematlab-cli: values read back from the runs
// database (profiles, peaks, configs), files and paths that are not what they seem (deep JSON,
// devices, pipes, links, a truncated database, another program's), rendezvous variables that
// point elsewhere. Each case checks the exit code; for refused input, that the message is one line
// naming the problem; that the database is byte for byte what it was where nothing should change
// it (its -wal and -shm files included); and that no file is left in the scratch folder or the
// private temporary folder and no process is left running.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "child_process.h"
#include "cli_runner.h"
#include "common/posix_files.h"
#include "plan/chain_costs_json.h"
#include "scratch_dir.h"
#include "store/run_store.h"
#include "store/sqlite_db.h"

namespace rematlab {
namespace {

using testing::ChildProcess;
using testing::count_lines;
using testing::last_line_json;
using testing::slurp;

const char* kTinyRun = "--preset tiny --steps 2 --threads 1";

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

std::set<std::string> names_in(const std::string& folder) {
  const std::vector<std::string> listed = files::list(folder);
  return {listed.begin(), listed.end()};
}

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

// A scratch folder with a runs database holding one finished run (run 1, tiny), and a private
// temporary folder every process of the case gets as TMPDIR.
class Bench {
 public:
  Bench() : dir_("hostile"), tmp_(dir_.file("tmp")), db_(dir_.file("runs.sqlite")) {
    files::make_directories(tmp_);
    const Outcome made = cli(std::string("run ") + kTinyRun + " --db " + db_);
    EXPECT_EQ(made.exit_code, 0) << made.err;
  }

  const std::string& db() const { return db_; }
  std::string file(const std::string& name) const { return dir_.file(name); }
  const std::string& tmp() const { return tmp_; }

  // Runs rematlab-cli with `arguments` and extra environment, {db} and {dir} replaced in both.
  Outcome cli(const std::string& arguments, const std::vector<std::string>& env = {}) const {
    std::vector<std::string> args = {REMATLAB_CLI_PATH};
    for (const std::string& word : words(placed(arguments))) args.push_back(word);
    std::vector<std::string> environment = {"TMPDIR=" + tmp_};
    for (const std::string& entry : env) environment.push_back(placed(entry));
    const std::string out = dir_.file(".out"), err = dir_.file(".err");
    Outcome outcome;
    {
      ChildProcess child(args, environment, out, err);
      outcome.exit_code = child.exit_code(std::chrono::minutes(5)).value_or(-2);
    }
    outcome.out = slurp(out);
    outcome.err = slurp(err);
    files::remove_file(out);
    files::remove_file(err);
    return outcome;
  }

  // `text` with {db} and {dir} replaced by the database's and the scratch folder's paths.
  std::string placed(std::string text) const {
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"{db}", db_},
                                     std::pair<std::string, std::string>{"{dir}", dir_.path()}}) {
      for (auto at = text.find(key); at != std::string::npos; at = text.find(key)) {
        text.replace(at, key.size(), value);
      }
    }
    return text;
  }

  // Runs SQL on the database directly, as someone editing it would.
  void tamper(const std::string& sql) const {
    Database db(db_, Database::Mode::kReadWrite);
    db.exec(sql);
  }

  // What must not change: the database's bytes (with -wal and -shm) and the folders' contents.
  struct Snapshot {
    std::string db, wal, shm;
    std::set<std::string> scratch, tmp;
  };
  Snapshot snapshot() const {
    return {slurp(db_), slurp(db_ + "-wal"), slurp(db_ + "-shm"), names_in(dir_.path()),
            names_in(tmp_)};
  }
  void expect_unchanged(const Snapshot& before) const {
    const Snapshot after = snapshot();
    EXPECT_TRUE(after.db == before.db) << "the database changed";
    EXPECT_TRUE(after.wal == before.wal) << "its -wal changed";
    EXPECT_TRUE(after.shm == before.shm) << "its -shm changed";
    EXPECT_EQ(after.scratch, before.scratch) << "files appeared or went beside it";
  }
  void expect_nothing_left() const {
    EXPECT_TRUE(names_in(tmp_).empty()) << "a temporary file was left";
    EXPECT_TRUE(testing::processes_with("TMPDIR=" + tmp_).empty()) << "a process was left running";
  }

 private:
  testing::ScratchDir dir_;
  std::string tmp_;
  std::string db_;
};

// Refused: exit 2, one line on stderr naming `names`, nothing changed or left.
void expect_refused(const Outcome& outcome, const std::string& names) {
  EXPECT_EQ(outcome.exit_code, 2) << outcome.err;
  EXPECT_EQ(count_lines(outcome.err), 1) << outcome.err;
  EXPECT_NE(outcome.err.find(names), std::string::npos) << outcome.err;
  EXPECT_LT(outcome.err.size(), 600u) << "a message, not a dump";
  EXPECT_EQ(outcome.err.find("Exception raised from"), std::string::npos) << outcome.err;
}

struct Case {
  std::string name;
  std::function<void(Bench&)> prepare;  // may be empty
  std::string arguments;
  std::vector<std::string> env;
  std::string names;  // what the one line must mention
};

// A port held by a listening socket for the case that needs one in use: "BUSY" in its
// environment is replaced by it.
class BusyPort {
 public:
  BusyPort() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::listen(fd_, 1);
    socklen_t length = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~BusyPort() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

class RefusedInput : public ::testing::TestWithParam<Case> {};

TEST_P(RefusedInput, OneLineExit2NothingChangedNothingLeft) {
  Bench bench;
  const Case& each = GetParam();
  if (each.prepare) each.prepare(bench);
  std::vector<std::string> env = each.env;
  std::optional<BusyPort> busy;
  for (std::string& entry : env) {
    if (entry.size() < 5 || entry.compare(entry.size() - 5, 5, "=BUSY") != 0) continue;
    if (!busy) busy.emplace();
    entry.replace(entry.size() - 4, 4, std::to_string(busy->port()));
  }
  const Bench::Snapshot before = bench.snapshot();
  const Outcome outcome = bench.cli(each.arguments, env);
  expect_refused(outcome, each.names);
  bench.expect_unchanged(before);
  bench.expect_nothing_left();
}

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// The database cut to half its size, as a copy interrupted halfway leaves it.
void truncate_database(Bench& bench) {
  bench.tamper("PRAGMA wal_checkpoint(TRUNCATE)");
  const std::string bytes = slurp(bench.db());
  files::remove_file(bench.db() + "-wal");
  files::remove_file(bench.db() + "-shm");
  std::ofstream(bench.db(), std::ios::binary | std::ios::trunc)
      << bytes.substr(0, bytes.size() / 2);
}

void another_programs_database(Bench& bench, bool empty) {
  files::remove_file(bench.db());
  Database db(bench.db(), Database::Mode::kReadWriteCreate);
  // VACUUM writes the header of an empty database; a file SQLite never wrote to stays 0 bytes.
  db.exec(empty
              ? "VACUUM"
              : "CREATE TABLE invoices (id INTEGER PRIMARY KEY); INSERT INTO invoices VALUES (1);");
}

std::string deep_spec(Bench& bench) {
  const std::string path = bench.file("deep.json");
  write(path, "{\"name\": " + nested(50000) + "}");
  return path;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RefusedInput,
    ::testing::Values(
        // Files that are not what they seem.
        Case{"DeepSpec",
             [](Bench& b) { deep_spec(b); },
             "sweep --spec {dir}/deep.json --db {db}",
             {},
             "nested deeper than 64"},
        Case{"DeepRunConfig",
             [](Bench& b) { deep_spec(b); },
             "run --config {dir}/deep.json --db {db}",
             {},
             "nested deeper than 64"},
        Case{"DeepSpecOfObjects",
             [](Bench& b) {
               std::string text;
               for (int i = 0; i < 50000; ++i) text += "{\"a\":";
               write(b.file("deep.json"), text + "1" + std::string(50000, '}'));
             },
             "sweep --spec {dir}/deep.json --db {db}",
             {},
             "nested deeper"},
        // A pipe or an oversized file where a small JSON file is expected: refused at once, not
        // waited on or read whole.
        Case{"SpecIsAPipeNobodyWrites",
             [](Bench& b) { ::mkfifo(b.file("spec.json").c_str(), 0600); },
             "sweep --spec {dir}/spec.json --db {db}",
             {},
             "not a regular file"},
        Case{"ModelConfigIsAPipeNobodyWrites",
             [](Bench& b) { ::mkfifo(b.file("config.json").c_str(), 0600); },
             "estimate --model-config {dir}/config.json",
             {},
             "not a regular file"},
        Case{"SpecLargerThanASpec",
             [](Bench& b) { write(b.file("big.json"), std::string((1 << 20) + 1, ' ')); },
             "sweep --spec {dir}/big.json --db {db}",
             {},
             "larger than 1.00 MiB"},
        Case{"DuplicateKeyInASpec",
             [](Bench& b) {
               write(b.file("twice.json"),
                     R"({"base": {"preset": "tiny", "steps": 2, "steps": 3}})");
             },
             "sweep --spec {dir}/twice.json --db {db}",
             {},
             "\"steps\" appears twice"},
        Case{"AHugeValueIsQuotedBriefly",
             [](Bench& b) {
               write(b.file("huge.json"),
                     "{\"base\": {\"steps\": \"" + std::string(1 << 19, 'x') + "\"}}");
             },
             "sweep --spec {dir}/huge.json --db {db}",
             {},
             "steps"},
        Case{
            "ProbeStepsOfOneInASpec",
            [](Bench& b) {
              write(
                  b.file("probe.json"),
                  R"({"base": {"preset": "tiny"}, "max_batch": {"budget": "12MiB", "probe_steps": 1}})");
            },
            "sweep --spec {dir}/probe.json --db {db}",
            {},
            "probe_steps"},
        Case{"ProbeStepsOfOneAsAFlag",
             nullptr,
             "max-batch --preset tiny --budget 12MiB --probe-steps 1",
             {},
             "--probe-steps"},
        Case{"TruncatedDatabaseForRuns", truncate_database, "runs --db {db}", {}, "damaged"},
        Case{"TruncatedDatabaseForShow", truncate_database, "show 1 --db {db}", {}, "damaged"},
        Case{"TruncatedDatabaseForARun",
             truncate_database,
             std::string("run ") + kTinyRun + " --db {db}",
             {},
             "damaged"},
        Case{"TruncatedDatabaseForExport",
             truncate_database,
             "export --csv {dir}/out.csv --db {db}",
             {},
             "damaged"},
        Case{"TruncatedDatabaseForASweep",
             [](Bench& b) {
               truncate_database(b);
               write(b.file("one.json"), R"({"base": {"preset": "tiny", "steps": 2}})");
             },
             "sweep --spec {dir}/one.json --db {db}",
             {},
             "damaged"},
        Case{"TruncatedDatabaseForDiagnose",
             truncate_database,
             "diagnose 1 --db {db}",
             {},
             "damaged"},
        Case{"AnotherProgramsDatabaseForRuns",
             [](Bench& b) { another_programs_database(b, false); },
             "runs --db {db}",
             {},
             "another program"},
        Case{"AnotherProgramsDatabaseForARun",
             [](Bench& b) { another_programs_database(b, false); },
             std::string("run ") + kTinyRun + " --db {db}",
             {},
             "another program"},
        Case{"AnotherProgramsEmptyDatabaseForUpgrade",
             [](Bench& b) { another_programs_database(b, true); },
             "upgrade --db {db}",
             {},
             "empty SQLite database"},
        Case{"ATextFileForUpgrade",
             [](Bench& b) { write(b.db(), "my notes\n"); },
             "upgrade --db {db}",
             {},
             "not a RematLab database"},
        // Reports asked for what is not there.
        Case{"ExportOfAMissingExperiment",
             nullptr,
             "export --experiment 5 --csv {dir}/out.csv --db {db}",
             {},
             "no experiment 5"},
        Case{"ExportOfAMissingRun",
             nullptr,
             "export --runs 999 --csv {dir}/out.csv --db {db}",
             {},
             "999"},
        Case{"ExportIntoAFolder", nullptr, "export --csv {dir} --db {db}", {}, "folder"},
        Case{"ExportOverTheDatabase",
             nullptr,
             "export --csv {db} --db {db}",
             {},
             "the runs database itself"},
        Case{"ExportThroughADanglingLink",
             [](Bench& b) { ::symlink(b.file("nowhere.csv").c_str(), b.file("link.csv").c_str()); },
             "export --csv {dir}/link.csv --db {db}",
             {},
             "symbolic link"},
        Case{"ExportIntoAPipeNobodyReads",
             [](Bench& b) { ::mkfifo(b.file("pipe").c_str(), 0600); },
             "export --csv {dir}/pipe --db {db}",
             {},
             "nobody reads"},
        Case{"ShowOfAMissingRun", nullptr, "show 999 --db {db}", {}, "999"},
        Case{"CompareWithAMissingRun", nullptr, "compare 1 999 --db {db}", {}, "999"},
        Case{"DiagnoseOfAMissingRun", nullptr, "diagnose 999 --db {db}", {}, "999"},
        // Rendezvous variables: refused before the database is created or a port is held.
        Case{"APortInUseCreatesNoDatabase",
             nullptr,
             std::string("run ") + kTinyRun + " --db {dir}/new.sqlite",
             {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=BUSY"},
             "MASTER_PORT"},
        Case{"AReachableRendezvousWithoutASecret",
             nullptr,
             std::string("run ") + kTinyRun + " --db {dir}/new.sqlite",
             {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=203.0.113.7", "MASTER_PORT=29999"},
             "REMATLAB_LAUNCH_SECRET"},
        Case{"AGuessableSecret",
             nullptr,
             std::string("run ") + kTinyRun + " --db {dir}/new.sqlite",
             {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "REMATLAB_LAUNCH_SECRET=abc"},
             "REMATLAB_LAUNCH_SECRET"},
        Case{"AWorldOfNone",
             nullptr,
             std::string("run ") + kTinyRun + " --db {dir}/new.sqlite",
             {"RANK=0", "WORLD_SIZE=0"},
             "WORLD_SIZE"},
        Case{"ARankOutsideTheWorld",
             nullptr,
             std::string("run ") + kTinyRun + " --db {dir}/new.sqlite",
             {"RANK=5", "WORLD_SIZE=2"},
             "RANK"},
        Case{"MoreRanksThanTheHostHolds",
             nullptr,
             std::string("run ") + kTinyRun + " --nproc 4000 --db {dir}/new.sqlite",
             {},
             "at least 16"},
        Case{"ShardedParametersInBf16",
             nullptr,
             std::string("run ") + kTinyRun +
                 " --nproc 2 --shard parameters --precision bf16 --db {db}",
             {},
             "--shard"},
        Case{"ABadWorkerCount",
             nullptr,
             "sweep --default-study --workers 0 --db {db}",
             {},
             "--workers"},
        // Flags.
        Case{"EstimateWithKeyValueHeadsThatDoNotDivide",
             nullptr,
             "estimate --arch llama --heads 4 --kv-heads 3",
             {},
             "--kv-heads"},
        Case{"EstimateOfAnUnknownFamily", nullptr, "estimate --arch tpu", {}, "--arch"},
        Case{"EstimateWithRopeThetaOnGpt",
             nullptr,
             "estimate --arch gpt --rope-theta 5e5",
             {},
             "--rope-theta"},
        Case{"APlanWithoutABudget", nullptr, "plan --preset tiny --db {db}", {}, "--budget"},
        Case{"APolicyWithAnEmptyInterval",
             nullptr,
             std::string("run ") + kTinyRun + " --checkpoint every: --db {db}",
             {},
             "every:"},
        Case{"AScheduleThatGoesBack",
             nullptr,
             std::string("run ") + kTinyRun + " --checkpoint schedule:0=1,0.5=2,0.2=3 --db {db}",
             {},
             "increase"},
        Case{"OffloadIntoAFile",
             [](Bench& b) { write(b.file("file"), "x"); },
             std::string("run ") + kTinyRun +
                 " --checkpoint every:1 --offload disk:{dir}/file/x --db {db}",
             {},
             "--offload"},
        Case{"ADatabaseInAMissingFolder",
             nullptr,
             std::string("run ") + kTinyRun + " --db {dir}/missing/runs.sqlite",
             {},
             "does not exist"},
        Case{"AChosenDefaultDatabaseInAMissingFolder",
             [](Bench& b) {
               write(b.file("one.json"), R"({"base": {"preset": "tiny", "steps": 2}})");
             },
             "sweep --spec {dir}/one.json",
             {"REMATLAB_DB={dir}/missing/chosen.sqlite"},
             "does not exist"},
        Case{"ADatabaseThatIsAPipe",
             [](Bench& b) { ::mkfifo(b.file("pipe.sqlite").c_str(), 0600); },
             "runs --db {dir}/pipe.sqlite",
             {},
             "not a regular file"},
        Case{"ARunIntoADatabaseThatIsAPipe",
             [](Bench& b) { ::mkfifo(b.file("pipe.sqlite").c_str(), 0600); },
             std::string("run ") + kTinyRun + " --db {dir}/pipe.sqlite",
             {},
             "not a regular file"},
        Case{"ALaunchIntoADatabaseThatIsAPipe",
             [](Bench& b) { ::mkfifo(b.file("pipe.sqlite").c_str(), 0600); },
             std::string("run ") + kTinyRun + " --nproc 2 --db {dir}/pipe.sqlite",
             {},
             "not a regular file"},
        Case{"ADatabaseThatIsADevice",
             nullptr,
             std::string("run ") + kTinyRun + " --db /dev/null",
             {},
             "not a regular file"},
        Case{"AMultiHostRendezvousOnLoopback",
             nullptr,
             std::string("run ") + kTinyRun + " --dist-timeout 3",
             {"RANK=0", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=1", "MASTER_ADDR=localhost",
              "MASTER_PORT=29573", "REMATLAB_LAUNCH_SECRET=0123456789abcdef0123"},
             "loopback address"}),
    [](const ::testing::TestParamInfo<Case>& param_info) { return param_info.param.name; });

// Figures read back from the database are input too: a kept profile with values no measurement
// gives is unreadable, so it is measured again and replaced, never planned with.
class HostileProfile : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(HostileProfile, IsMeasuredAgainAndReplacedNeverPlannedWith) {
  Bench bench;
  // The same configuration for both commands (plan's default repeats are the run's): one row.
  const std::string plan = "plan --preset tiny --threads 1 --budget 4MiB --json --db {db}";
  const Outcome kept = bench.cli(plan);
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  const auto& [path, value] = GetParam();
  for (const std::string& command :
       {plan, std::string("run ") + kTinyRun + " --checkpoint plan:4MiB --json --db {db}"}) {
    bench.tamper("UPDATE profiles SET costs = json_set(costs, '" + path + "', json('" + value +
                 "'))");
    const Outcome outcome = bench.cli(command);
    ASSERT_EQ(outcome.exit_code, 0) << command << ": " << outcome.err;
    const nlohmann::json json = last_line_json(outcome.out);
    if (json.contains("profile_source")) {
      EXPECT_NE(json["profile_source"].get<std::string>().find("kept now"), std::string::npos)
          << "the damaged row was used: " << json.dump();
      EXPECT_GT(json["predicted_step_ms"].get<double>(), 0.0);
      EXPECT_LE(json["predicted_peak_bytes"].get<int64_t>(), int64_t{4} << 20);
    } else {
      EXPECT_EQ(json["status"], "ok") << json.dump();
      RunStore store(bench.db(), StoreAccess::kReadOnly, false);
      const RunRecord run = store.runs().back();
      ASSERT_TRUE(run.request.plan.has_value());
      EXPECT_NE(run.request.plan->profile_source.find("kept now"), std::string::npos)
          << "the damaged row was used: " << run.request.plan->profile_source;
      EXPECT_GT(run.request.plan->predicted_step_ms, 0.0);
      EXPECT_LE(run.request.plan->predicted_peak_bytes, int64_t{4} << 20);
    }
    // What the database keeps now reads back as a profile.
    RunStore store(bench.db(), StoreAccess::kReadOnly, false);
    const auto rows = store.chain_profiles();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_NO_THROW(plan::chain_costs_from_json(nlohmann::json::parse(rows[0].second.costs)));
  }
  bench.expect_nothing_left();
}

INSTANTIATE_TEST_SUITE_P(Values, HostileProfile,
                         ::testing::Values(std::make_pair("$.stages[0].kept_bytes", "-1e12"),
                                           std::make_pair("$.stages[1].kept_bytes", "1e30"),
                                           std::make_pair("$.stages[0].output_bytes", "-1"),
                                           std::make_pair("$.stages[2].forward_ms", "-6e9"),
                                           std::make_pair("$.stages[0].forward_ms", "\"nan\""),
                                           std::make_pair("$.time_scale", "0"),
                                           std::make_pair("$.head_peak_bytes",
                                                          "9223372036854775807"),
                                           std::make_pair("$.stages", "[]")));

TEST(HostileStore, AKeptPeakThatIsNoPeakIsMeasuredAgainAndReplaced) {
  Bench bench;
  for (const char* flops : {"-1", "0", "1e300"}) {
    bench.tamper(std::string("UPDATE peaks SET flops = ") + flops);
    const Outcome run = bench.cli(std::string("run ") + kTinyRun + " --json --db {db}");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const nlohmann::json json = last_line_json(run.out);
    EXPECT_EQ(json["status"], "ok");
    EXPECT_GT(json["peak_flops"].get<double>(), 0.0);
    EXPECT_LT(json["peak_flops"].get<double>(), 1e20);
    EXPECT_NE(json["peak_flops_source"].get<std::string>().find("replacing"), std::string::npos)
        << json["peak_flops_source"];
  }
  // A sweep's points are not failed by it either.
  bench.tamper("UPDATE peaks SET flops = -5");
  write(bench.file("one.json"), R"({"base": {"preset": "tiny", "steps": 2, "threads": 1}})");
  const Outcome sweep = bench.cli("sweep --spec {dir}/one.json --json --db {db}");
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  RunStore store(bench.db(), StoreAccess::kReadOnly, false);
  EXPECT_EQ(store.runs().back().status, RunStatus::kOk) << store.runs().back().message;
  bench.expect_nothing_left();
}

TEST(HostileStore, ARecordNestedDeepReadsWithoutACrash) {
  Bench bench;
  bench.tamper("UPDATE runs SET config = '" + nested(50000) +
               "', request = '{\"a\": " + nested(50000) + "}' WHERE id = 1");
  const Bench::Snapshot before = bench.snapshot();
  for (const char* report : {"runs --db {db}", "show 1 --db {db}", "export --csv - --db {db}"}) {
    const Outcome outcome = bench.cli(report);
    EXPECT_EQ(outcome.exit_code, 0) << report << ": " << outcome.err;
  }
  bench.expect_unchanged(before);
  bench.expect_nothing_left();
}

TEST(HostileStore, ReportsOnAQuietDatabaseLeaveNoFilesBesideIt) {
  Bench bench;
  bench.tamper("PRAGMA wal_checkpoint(TRUNCATE)");
  files::remove_file(bench.db() + "-wal");
  files::remove_file(bench.db() + "-shm");
  const Bench::Snapshot before = bench.snapshot();
  for (const char* report : {"runs --db {db}", "show 1 --db {db}", "compare 1 --db {db}",
                             "diagnose 1 --no-replay --db {db}", "runs --db {db} --status bogus"}) {
    bench.cli(report);
    EXPECT_FALSE(files::exists(bench.db() + "-wal")) << report;
    EXPECT_FALSE(files::exists(bench.db() + "-shm")) << report;
  }
  bench.expect_unchanged(before);
}

// Paths that are not regular files are written through or refused, never replaced.
TEST(HostileExport, DevicesPipesStdoutAndLinksAreWrittenThroughNotReplaced) {
  Bench bench;
  const Outcome null_device = bench.cli("export --csv /dev/null --db {db}");
  EXPECT_EQ(null_device.exit_code, 0) << null_device.err;
  struct stat device {};
  ASSERT_EQ(::stat("/dev/null", &device), 0);
  EXPECT_TRUE(S_ISCHR(device.st_mode)) << "/dev/null was replaced";

  for (const char* stdout_path : {"-", "/dev/stdout"}) {
    const Outcome printed = bench.cli(std::string("export --csv ") + stdout_path + " --db {db}");
    EXPECT_EQ(printed.exit_code, 0) << printed.err;
    EXPECT_EQ(printed.out.rfind("id,experiment_id,", 0), 0u) << stdout_path << ": " << printed.out;
  }
  struct stat out_link {};
  ASSERT_EQ(::lstat("/dev/stdout", &out_link), 0);
  EXPECT_TRUE(S_ISLNK(out_link.st_mode)) << "/dev/stdout was replaced";

  // A link to a report: the report is replaced, the link stays.
  write(bench.file("report.csv"), "old\n");
  ASSERT_EQ(::symlink(bench.file("report.csv").c_str(), bench.file("latest.csv").c_str()), 0);
  const Outcome linked = bench.cli("export --csv {dir}/latest.csv --db {db}");
  EXPECT_EQ(linked.exit_code, 0) << linked.err;
  struct stat link {};
  ASSERT_EQ(::lstat(bench.file("latest.csv").c_str(), &link), 0);
  EXPECT_TRUE(S_ISLNK(link.st_mode)) << "the link was replaced by a file";
  EXPECT_EQ(slurp(bench.file("report.csv")).rfind("id,", 0), 0u);

  // A pipe with a reader gets the CSV.
  ASSERT_EQ(::mkfifo(bench.file("pipe").c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] {
    std::ifstream pipe(bench.file("pipe"));
    std::stringstream text;
    text << pipe.rdbuf();
    received = text.str();
  });
  // The reader opens first: a writer finds nobody on a pipe it opens before.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const Outcome piped = bench.cli("export --csv {dir}/pipe --db {db}");
  reader.join();
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(received.rfind("id,", 0), 0u) << received;
  struct stat fifo {};
  ASSERT_EQ(::lstat(bench.file("pipe").c_str(), &fifo), 0);
  EXPECT_TRUE(S_ISFIFO(fifo.st_mode));
  bench.expect_nothing_left();
}

// A policy typed with '+' or blanks is recorded in its one canonical spelling, which reads back
// as the same policy everywhere the record is read.
TEST(HostilePolicy, PlusSignsAndBlanksAreStoredCanonicalAndReadBack) {
  Bench bench;
  const std::vector<std::pair<std::string, std::string>> typed = {
      {"every:+2", "every:2"},
      {"schedule:0=1,+0.5=2", "schedule:0=1,0.5=2"},
      {"sublayer:+1,+2", "sublayer:1,2"}};
  int64_t id = 1;
  for (const auto& [policy, canonical] : typed) {
    const Outcome run =
        bench.cli(std::string("run ") + kTinyRun + " --checkpoint " + policy + " --json --db {db}");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(last_line_json(run.out)["checkpoint"], canonical);
    ++id;
    RunStore store(bench.db(), StoreAccess::kReadOnly, false);
    EXPECT_EQ(store.run(id).config.checkpoint, canonical);
    EXPECT_EQ(store.run(id).config.offload, "none");
    const Outcome diagnosed =
        bench.cli("diagnose " + std::to_string(id) + " --no-replay --db {db}");
    EXPECT_EQ(diagnosed.exit_code, 0) << diagnosed.err;
    const Outcome csv = bench.cli("export --runs " + std::to_string(id) + " --csv - --db {db}");
    const std::string field =
        canonical.find(',') == std::string::npos ? canonical : "\"" + canonical + "\"";
    EXPECT_NE(csv.out.find("," + field + ","), std::string::npos) << csv.out;
  }
  // A spec's axis value too, with its offload after the '+'.
  write(bench.file("plus.json"),
        R"({"base": {"preset": "tiny", "steps": 2, "threads": 1},
            "axes": {"checkpoint": ["every:+1+disk", "schedule:0=1, 0.5=2"]}})");
  const Outcome sweep = bench.cli("sweep --spec {dir}/plus.json --db {db}");
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  RunStore store(bench.db(), StoreAccess::kReadOnly, false);
  const std::vector<RunRecord> runs = store.runs();
  ASSERT_EQ(runs.size(), 6u);
  EXPECT_EQ(runs[4].config.checkpoint, "every:1");
  EXPECT_EQ(runs[4].config.offload, "disk");
  EXPECT_EQ(runs[5].config.checkpoint, "schedule:0=1,0.5=2");
  bench.expect_nothing_left();
}

TEST(HostileDefaults, NamingTheDefaultDatabaseCreatesNothing) {
  Bench bench;
  const std::string data = bench.file("data");
  for (const char* command : {"version", "estimate --model tiny", "peak --help", "runs --help"}) {
    bench.cli(command, {"XDG_DATA_HOME=" + data, "REMATLAB_DB="});
    EXPECT_FALSE(files::exists(data)) << command << " made the data folder";
  }
}

// A max-batch answer trains within its budget: a schedule's later, larger intervals included.
TEST(HostileMaxBatch, AScheduleIsProbedAtEveryIntervalItTrains) {
  Bench bench;
  const std::string flags =
      " --preset tiny --threads 1 --checkpoint schedule:0=1,0.5=2 --budget 6MiB --json";
  const Outcome found = bench.cli("max-batch" + flags);
  ASSERT_EQ(found.exit_code, 0) << found.err;
  const int64_t batch = last_line_json(found.out)["max_batch"].get<int64_t>();
  ASSERT_GT(batch, 0);
  // Trained at that batch for long enough to reach the schedule's second interval.
  const Outcome trained = bench.cli("run" + flags + " --steps 4 --batch " + std::to_string(batch));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  EXPECT_EQ(last_line_json(trained.out)["status"], "ok") << trained.out;
}

}  // namespace
}  // namespace rematlab
