// SweepWorker's data-parallel run: the form's one run trained by N ranks, each a process of
// rematlab-cli started by core's local launcher (the launcher of `run --nproc`), so the run is
// trained, checked and recorded exactly as the CLI's: rank 0 records it with every rank's
// figures. Each rank's steps reach the live view through the launcher's store, one curve per
// rank. Stop is forwarded to every rank, which end at their next micro-batch and record the run
// cancelled; the launcher reaps every rank before this returns and kills one that does not stop.
#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QTemporaryFile>
#include <chrono>
#include <stdexcept>
#include <string>

#include "common/current_exception.h"
#include "common/errors.h"
#include "launch/rank_launch.h"
#include "store/run_store.h"
#include "sweep/sweep_spec.h"
#include "sweep_worker.h"

namespace rematlab::ui {
namespace {

// How long ranks asked to stop get before they are killed: they stop at their next
// micro-batch, and rank 0 then records the run.
constexpr std::chrono::seconds kStopGrace{15};
// How long a rank waits for the others (rendezvous, each collective) before it gives up.
constexpr int kRankTimeoutSeconds = 60;

// The program every rank runs: $REMATLAB_CLI, else the rematlab-cli installed beside the window.
QString rank_program() {
  QString program = qEnvironmentVariable("REMATLAB_CLI");
  if (program.isEmpty()) program = QCoreApplication::applicationDirPath() + "/rematlab-cli";
  if (!QFileInfo(program).isExecutable()) {
    throw std::runtime_error(
        "cannot start the ranks: " + QDir::toNativeSeparators(program).toStdString() +
        " is not there (data-parallel runs start their ranks with "
        "rematlab-cli; set REMATLAB_CLI to where it is)");
  }
  return program;
}

// The form's one run, as the layout's ranks train it (validated as the CLI would).
RunConfig run_on_ranks(const nlohmann::ordered_json& spec, const RankLayout& layout) {
  const std::vector<SweepPoint> points = expand_sweep(parse_sweep_spec(spec));
  if (points.size() != 1 || points.front().request.max_batch) {
    throw InvalidInput("ranks", "ranks train one run together, not a sweep");
  }
  RunConfig config = points.front().config;
  apply_rank_layout(layout, config);
  validate(config);
  return config;
}

// Every rank's command line: `run` of the one-point spec in `config_file`, recorded in `database`.
std::vector<std::string> rank_arguments(const QString& program, const QString& config_file,
                                        const QString& database, const RankLayout& layout) {
  std::vector<std::string> arguments = {program.toStdString(),
                                        "run",
                                        "--config",
                                        config_file.toStdString(),
                                        "--db",
                                        database.toStdString(),
                                        "--shard",
                                        layout.shard.toStdString(),
                                        "--tp",
                                        std::to_string(layout.tensor_ranks),
                                        "--pp",
                                        std::to_string(layout.pipeline_stages),
                                        "--virtual-stages",
                                        std::to_string(layout.virtual_stages),
                                        "--dist-timeout",
                                        std::to_string(kRankTimeoutSeconds)};
  if (layout.sequence_parallel) arguments.push_back("--sequence-parallel");
  if (!layout.pipeline_split.isEmpty()) {
    arguments.insert(arguments.end(), {"--pp-split", layout.pipeline_split.toStdString()});
  }
  if (!layout.bucket_size.isEmpty()) {
    arguments.insert(arguments.end(), {"--bucket-size", layout.bucket_size.toStdString()});
  }
  return arguments;
}

}  // namespace

void SweepWorker::run_data_parallel(const QString& spec_json, const RankLayout& layout,
                                    const QString& database) {
  try {
    nlohmann::ordered_json spec = nlohmann::ordered_json::parse(spec_json.toStdString());
    const RunConfig config = run_on_ranks(spec, layout);
    const int ranks = layout.ranks;
    const QString program = rank_program();
    { RunStore opened(database.toStdString()); }  // refused here, before any rank starts

    QTemporaryFile config_file(QDir::tempPath() + "/rematlab-ranks-XXXXXX.json");
    if (!config_file.open() || config_file.write(QByteArray::fromStdString(spec.dump())) < 0 ||
        !config_file.flush()) {
      throw std::runtime_error("cannot write the run for the ranks in " +
                               QDir::tempPath().toStdString() + ": " +
                               config_file.errorString().toStdString());
    }
    launch::RankLaunch launch;
    launch.nproc = ranks;
    launch.args = rank_arguments(program, config_file.fileName(), database, layout);
    launch.grace = kStopGrace;
    launch.cancel = &cancel_;
    launch.db = database.toStdString();

    const QString legend = QString::fromStdString(describe_run(config));
    for (int rank = 0; rank < ranks; ++rank) {
      emit runStarted(rank, QString("%1 · rank %2").arg(legend).arg(rank),
                      static_cast<double>(config.budget_bytes));
    }
    int64_t last_step = 0;
    launch.on_rank_step = [&](int rank, const StepMetrics& step) {
      emit stepFinished(rank, step);
      if (rank != 0) return;
      last_step = step.step + 1;
      SweepPosition position;
      position.run_count = 1;
      position.step = last_step;
      position.total_steps = step.total_steps;
      position.label = legend;
      emit positionChanged(position);
    };
    const launch::RankLaunchOutcome outcome = launch::launch_ranks(launch);
    if (!outcome.run_id && cancel_.load()) {
      // Stopped before rank 0 recorded anything (a rank may even have died of the interrupt
      // before it could handle it): nothing ran, nothing is recorded.
      emit sweepFinished(QString("Stopped before the run on %1 ranks started").arg(ranks), true);
      return;
    }
    if (!outcome.run_id) {
      throw std::runtime_error("the ranks recorded no run: " + outcome.failure);
    }
    RunStore store(database.toStdString());
    const RunRecord record = store.run(*outcome.run_id);
    emit runFinished(0, record.status, QString::fromStdString(record.message), record.id,
                     store.timeline(record.id));
    const bool stopped = cancel_.load() && record.status == RunStatus::kCancelled;
    emit sweepFinished(
        stopped ? QString("Stopped the run on %1 ranks after step %2 of %3; it is recorded as "
                          "cancelled")
                      .arg(ranks)
                      .arg(last_step)
                      .arg(config.steps)
                : QString("1 run on %1 ranks recorded").arg(ranks),
        stopped);
  } catch (...) {
    emit failed(QString::fromStdString(describe_current_exception()));
  }
}

}  // namespace rematlab::ui
