#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <set>

#include "checkpoint/checkpoint_policy.h"
#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/dist_options.h"
#include "cli/run_distributed.h"
#include "cli/run_options.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "common/json_numbers.h"
#include "parallel/dist_env.h"
#include "parallel/dist_errors.h"
#include "store/peak_flops_registry.h"
#include "store/profile_registry.h"
#include "store/run_recorder.h"
#include "store/run_store.h"
#include "store/run_writer.h"
#include "sweep/sweep_spec.h"
#include "train/trainer.h"

namespace rematlab::cli {
namespace {

// What a plan:BUDGET run chose, and what it predicted (for each stage under a pipeline), beside
// the figures measured above.
void print_plan(const RunSummary& summary) {
  if (!summary.planned || summary.planned->chosen.empty()) return;
  const PlannedPolicy& planned = *summary.planned;
  std::cout << "plan             " << planned.chosen << " under "
            << format_bytes(planned.budget_bytes) << ", predicted peak activation "
            << format_bytes(planned.predicted_peak_bytes);
  if (!planned.predicted_stage_peak_bytes.empty()) {
    std::cout << " (stages";
    for (const int64_t peak : planned.predicted_stage_peak_bytes) {
      std::cout << " " << format_bytes(peak);
    }
    std::cout << ")";
  }
  std::cout << "\n";
}

// --pp-split balanced: the split the chain's measured costs gave, and each chunk's share of the
// step as measured (its blocks' forwards and backwards, the embedding's or the head's with it).
void print_balanced_split(const RunSummary& summary) {
  const RunConfig& config = summary.config;
  if (config.pp_split_chunk_ms.empty()) return;
  std::cout << "split            ";
  for (std::size_t i = 0; i < config.pp_split.size(); ++i) {
    std::cout << (i ? "," : "") << config.pp_split[i];
  }
  std::cout << " balanced by the measured chain: chunks";
  for (std::size_t i = 0; i < config.pp_split_chunk_ms.size(); ++i) {
    std::cout << (i ? " / " : " ") << format_number(config.pp_split_chunk_ms[i], 1);
  }
  std::cout << " ms a step\n";
}

// A mixture of experts: the busiest expert's load over the run (how far the router strayed from
// sending every expert its share, which its activations must hold room for) and under --ep the
// fullest rank's, with the estimate that sizes the run's activations at them.
void print_expert_load(const RunSummary& summary) {
  const double most = most_recorded(summary.steps, &StepMetrics::expert_load);
  if (std::isnan(most)) return;
  std::cout << "expert load      " << format_number(most, 2)
            << "× its share at most (the busiest expert's rows in one block)\n";
  // The flags in full: rounded, a load recorded at its bound (E/k = 8/3) would pass it.
  std::string flags = " --expert-load " + number_text(most);
  const double rank_most = most_recorded(summary.steps, &StepMetrics::expert_rank_load);
  if (!std::isnan(rank_most)) {
    const double block_most =
        std::max(rank_most, most_recorded(summary.steps, &StepMetrics::expert_block_load));
    std::cout << "expert rank load " << format_number(rank_most, 3)
              << "× its share at most (the rows the fullest rank's experts took in a step over "
              << "its tokens'), " << format_number(block_most, 3) << "× in its busiest block\n";
    flags = " --expert-rank-load " + number_text(rank_most) + " --expert-block-load " +
            number_text(block_most) + flags;
  }
  std::cout << "                 estimate" << flags
            << " with this run's settings sizes its activations at these loads\n";
}

void print_summary(const RunSummary& summary) {
  std::cout << "status           " << to_string(summary.status)
            << (summary.message.empty() ? "" : " (" + summary.message + ")") << "\n"
            << "params           " << summary.params << "\n";
  // A run that ended before its first step measured nothing: no zeros that read as figures.
  if (summary.steps_completed == 0) return;
  std::cout << "loss             " << format_number(summary.first_loss, 4) << " -> "
            << format_number(summary.final_loss, 4) << "\n"
            << "tokens/s         " << format_number(summary.tokens_per_s, 0) << "\n"
            << "step             " << format_number(summary.step_ms, 1) << " ms (forward "
            << format_number(summary.forward_ms, 1) << ", backward "
            << format_number(summary.backward_ms, 1) << ")\n"
            << "peak             " << format_bytes(summary.peak_bytes) << "\n"
            << "baseline         " << format_bytes(summary.baseline_bytes) << "\n"
            << "peak activation  " << format_bytes(summary.peak_activation_bytes) << "\n"
            << "process RSS peak " << format_bytes(summary.rss_peak_bytes) << "\n";
  if (summary.model_flops > 0.0) {
    std::cout << "MFU / HFU        " << format_number(100.0 * summary.mfu, 1) << " % / "
              << format_number(100.0 * summary.hfu, 1) << " % of "
              << format_number(summary.peak_flops / 1e9, 1) << " GFLOP/s ("
              << summary.peak_flops_source << ")\n";
  } else {
    std::cout << "MFU / HFU        unknown (no step was timed)\n";
  }
  print_plan(summary);
  print_balanced_split(summary);
  print_expert_load(summary);
  if (summary.ranks.empty()) return;
  std::cout << "communication    " << format_number(summary.comm_ms, 1) << " ms per step, "
            << format_number(summary.comm_hidden_ms, 1) << " ms hidden, "
            << format_number(summary.comm_wait_ms, 1) << " ms waited"
            << (summary.config.pp > 1
                    ? ": " + format_number(summary.bubble_ms, 1) + " ms bubble, " +
                          format_number(summary.transfer_ms, 1) + " ms transfer"
                    : std::string())
            << (summary.config.ep > 1
                    ? ": " + format_number(summary.dispatch_ms, 1) + " ms all-to-all"
                    : std::string())
            << " (rank 0)\n";
  // A pipeline's ranks hold unlike stages: which one, and what its activations took.
  const int64_t pp = summary.config.pp;
  const int64_t stage_ranks =
      std::max<int64_t>(1, summary.config.world_size / std::max<int64_t>(1, pp));
  std::vector<std::vector<std::string>> rows;
  for (const RankResult& rank : summary.ranks) {
    std::vector<std::string> row = {std::to_string(rank.rank)};
    if (pp > 1) {
      row.push_back(std::to_string(rank.rank / stage_ranks));
      row.push_back(format_bytes(rank.peak_activation_bytes));
    }
    for (std::string cell :
         {format_bytes(rank.peak_bytes), format_bytes(rank.model_state_bytes()),
          format_bytes(rank.optimizer_bytes), format_bytes(rank.buffer_peak_bytes),
          format_number(rank.step_ms, 1), format_number(rank.comm_ms, 1),
          format_number(rank.comm_hidden_ms, 1), format_number(rank.comm_wait_ms, 1)}) {
      row.push_back(std::move(cell));
    }
    if (pp > 1) {
      row.push_back(format_number(rank.bubble_ms, 1));
      row.push_back(format_number(rank.transfer_ms, 1));
    }
    rows.push_back(std::move(row));
  }
  std::vector<std::string> header = {"rank"};
  if (pp > 1) header.insert(header.end(), {"stage", "activations"});
  header.insert(header.end(), {"peak", "model states", "optimizer", "buffers", "step ms", "comm ms",
                               "hidden ms", "wait ms"});
  // Within the wait: idle until a neighbouring stage reached a message, and the message passing.
  if (pp > 1) header.insert(header.end(), {"bubble ms", "transfer ms"});
  std::cout << "\n" << format_table(header, rows);
}

// A run given by `--config FILE`, and the experiment its spec names.
struct ConfigFile {
  RunConfig config;
  std::string experiment;
  nlohmann::ordered_json spec;
};

// `--config FILE`: the run as a sweep spec of one point, the form the window builds (which starts
// its ranks with it). The model and training flags are then refused: one place says what runs.
// The run is recorded under the spec's experiment, as `sweep` would record it.
ConfigFile config_from_file(const CLI::App& command, const std::string& path) {
  const std::set<std::string> with_config = {"--config",      "--db",
                                             "--name",        "--json",
                                             "--nproc",       "--shard",
                                             "--bucket-size", "--dist-timeout",
                                             "--tp",          "--sequence-parallel",
                                             "--pp",          "--virtual-stages",
                                             "--pp-split",    "--ep"};
  for (const CLI::Option* option : command.get_options()) {
    if (option->count() == 0 || with_config.count(option->get_name()) > 0) continue;
    throw InvalidInput("--config", "give the run either in the file or as flags, not both (" +
                                       option->get_name() + " was given too)");
  }
  SweepSpec spec;
  try {
    spec = load_sweep_spec(path);
  } catch (const InvalidInput& error) {
    throw InvalidInput("--config", error.field() == "--spec"
                                       ? error.reason()
                                       : error.field() + ": " + error.reason());
  }
  for (const std::string& warning : spec.warnings) std::cerr << "warning: " << warning << "\n";
  const std::vector<SweepPoint> points = expand_sweep(spec);
  if (points.size() != 1 || points.front().request.max_batch) {
    throw InvalidInput("--config",
                       "'" + path + "' describes " +
                           (points.size() == 1 ? std::string("a max-batch search")
                                               : std::to_string(points.size()) + " runs") +
                           "; run takes one (sweep takes several)");
  }
  return {points.front().config, spec.name, spec.source};
}

void print_result(const RunSummary& summary, bool json) {
  if (json) {
    print_json_line(to_json(summary));
  } else {
    print_summary(summary);
  }
}

// One process, no data parallelism: trains `config` here, recorded in `db` when one is given.
RunSummary train_here(RunConfig config, const std::string& db, const std::string& name,
                      const ConfigFile& given, const std::atomic<bool>& cancel) {
  // The trainer first: everything it sets up (the model, an offload directory) can still
  // fail as bad input before a database is created or written. Except for a plan,
  // which the trainer makes from the chain's costs: those the database kept for this
  // configuration are read first (the config checked before), else measured and kept.
  std::unique_ptr<RunStore> store;
  if (!db.empty() && CheckpointPolicy::parse(config.checkpoint).is_plan()) {
    validate(config);
    store = std::make_unique<RunStore>(db);
    resolve_chain_costs(config, store.get(), &cancel);
  }
  Trainer trainer(config, nullptr, &cancel);
  if (!db.empty() && !store) store = std::make_unique<RunStore>(db);  // creates it
  // Before training: the peak kept for this device, or one measured now while it is
  // quiet.
  resolve_peak_flops(config, store.get());
  trainer.use_peak_flops(config.peak_flops, config.peak_flops_source);
  std::unique_ptr<RunWriter> writer;
  RunRecorder recorder;
  if (store) {
    writer = std::make_unique<RunWriter>(db);
    recorder = RunRecorder(writer.get(), experiment_for(*writer, given.experiment, given.spec),
                           name.empty() ? describe_run(config) : name, config);
  }
  TrainerCallbacks callbacks;
  callbacks.cancel = &cancel;
  callbacks.on_step = [&](const StepMetrics& step) {
    print_step_progress(step, "");
    recorder.add_step(step);
  };
  RunSummary summary;
  try {
    summary = trainer.run(callbacks);
  } catch (const std::exception& error) {
    recorder.fail(error.what());
    throw;
  }
  summary.run_id = recorder.id();
  recorder.finish(summary);
  return summary;
}

}  // namespace

Command add_run_command(CLI::App& app, const std::atomic<bool>& cancel) {
  auto* command = app.add_subcommand("run", "Train a model and measure memory, time and loss");
  auto options = std::make_shared<RunOptions>();
  options->add_to(*command);
  auto dist_options = std::make_shared<DistOptions>();
  dist_options->add_to(*command);
  auto db = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  auto config_file = std::make_shared<std::string>();
  command->add_option("--config", *config_file,
                      "The run as a sweep spec of one point (JSON), instead of the model and "
                      "training flags; with --db it is recorded under the spec's experiment");
  command->add_option("--db", *db, "Record the run (and every step) in this runs database");
  command->add_option("--name", *name, "The run's name in the database (default: its policy)");
  return {command, [command, options, dist_options, db, name, config_file, &cancel]() {
            const ConfigFile given = config_file->empty()
                                         ? ConfigFile{options->resolve(), {}, {}}
                                         : config_from_file(*command, *config_file);
            RunConfig config = given.config;
            dist_options->apply(config);
            const launch::RankRunOptions rank_options{
                *db,
                *name,
                dist_options->timeout(),
                given.experiment,
                given.spec,
                [](const StepMetrics& step) { print_step_progress(step, ""); }};
            const parallel::DistEnv env = parallel::dist_env_from_process();
            if (env.distributed()) {
              if (dist_options->nproc_given()) {
                throw InvalidInput(
                    "--nproc", "this process is already rank " + std::to_string(env.rank) + " of " +
                                   std::to_string(env.world_size) + " (started by " + env.launcher +
                                   "); leave starting ranks to the launcher");
              }
              try {
                const std::optional<RunSummary> summary =
                    launch::run_as_rank(config, env, rank_options, cancel);
                if (summary) print_result(*summary, options->json);
              } catch (const parallel::PeerFailure& failure) {
                std::cerr << "rematlab-cli: error: " << failure.what() << std::endl;
                return parallel::kExitPeerFailed;
              }
              return 0;
            }
            if (config.world_size > 1) return launch_local_ranks(config, rank_options, cancel);
            if (config.shard != "none") {
              // Sharding over one rank: the data-parallel path, in this process, on a free port
              // (or on the store of the launcher that started it alone: the window's).
              parallel::DistEnv alone = env;
              if (env.launcher != "rematlab") {
                alone = parallel::DistEnv{};
                alone.master_port = 0;
              }
              const std::optional<RunSummary> summary =
                  launch::run_as_rank(config, alone, rank_options, cancel);
              if (summary) print_result(*summary, options->json);
              return 0;
            }
            print_result(train_here(config, *db, *name, given, cancel), options->json);
            return 0;  // an oom, cancelled or diverged run is a result, not a failure
          }};
}

}  // namespace rematlab::cli
