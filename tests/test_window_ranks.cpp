// Data-parallel runs started from the window, offscreen: the ranks are rematlab-cli processes
// started by core's launcher; each rank's memory is drawn, Stop ends every rank, and the run is
// recorded with every rank's figures under the form's experiment.
#include <signal.h>
#include <unistd.h>

#include <QCheckBox>
#include <QComboBox>
#include <QElapsedTimer>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTableView>
#include <QTest>

#include "child_process.h"
#include "live_charts.h"
#include "runs_view.h"
#include "window_bench.h"

namespace {

using rematlab::RunStatus;
using rematlab::RunStore;
using rematlab::ui::ExperimentPanel;
using rematlab::ui::LiveCharts;
using rematlab::ui::MainWindow;
using rematlab::ui::testing::Bench;
using rematlab::ui::testing::kTimeoutMs;

// The processes whose parent is this one (the ranks a data-parallel run started).
std::vector<pid_t> children_of_this_process() { return rematlab::testing::children_of(::getpid()); }

// Two ranks of the tiny model (set by Bench), whose steps take milliseconds.
void two_tiny_ranks(ExperimentPanel* panel, const char* shard) {
  panel->batch_field()->setText("2");
  panel->ranks_field()->setValue(2);
  panel->shard_field()->setCurrentText(shard);
}

// Waits until `runs` series are charted and series `last` has two steps, or the sweep ended.
void wait_for_two_steps(const MainWindow& window, int runs, int last, const QSignalSpy& ended) {
  QElapsedTimer waited;
  waited.start();
  const LiveCharts* charts = window.charts();
  while ((charts->run_count() < runs || charts->points(LiveCharts::kMemory, last) < 2) &&
         waited.elapsed() < kTimeoutMs && ended.isEmpty()) {
    QTest::qWait(20);
  }
}

TEST(MainWindow, ATwoRankRunDrawsAMemoryCurvePerRankAndIsRecordedWithBoth) {
  Bench bench;
  two_tiny_ranks(bench.panel, "optimizer");
  bench.panel->steps_field()->setValue(4);
  ASSERT_EQ(bench.run_sweep(), "ok") << bench.window.status_text().toStdString();
  const LiveCharts* charts = bench.window.charts();
  ASSERT_EQ(charts->run_count(), 2);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(charts->points(LiveCharts::kMemory, rank), 4) << "rank " << rank;
    EXPECT_TRUE(
        charts->legend_name(LiveCharts::kMemory, rank).contains(QString("rank %1").arg(rank)))
        << charts->legend_name(LiveCharts::kMemory, rank).toStdString();
  }
  EXPECT_TRUE(children_of_this_process().empty()) << "a rank outlived the run";
  RunStore store = bench.reader();
  ASSERT_EQ(store.runs().size(), 1u);
  const rematlab::RunRecord run = store.runs()[0];
  EXPECT_EQ(run.status, RunStatus::kOk) << run.message;
  EXPECT_EQ(run.config.world_size, 2);
  EXPECT_EQ(run.config.shard, "optimizer");
  ASSERT_EQ(run.result.ranks.size(), 2u);
  for (const rematlab::RankResult& rank : run.result.ranks) {
    EXPECT_EQ(rank.step_peak_bytes.size(), 4u) << "rank " << rank.rank;
    EXPECT_GT(rank.optimizer_bytes, 0) << "rank " << rank.rank;
  }
  EXPECT_EQ(store.steps(run.id).size(), 4u);
  EXPECT_TRUE(bench.window.status_text().contains("1 run on 2 ranks recorded"))
      << bench.window.status_text().toStdString();
}

TEST(MainWindow, StopEndsEveryRankOfARunAndRecordsItCancelled) {
  Bench bench;
  two_tiny_ranks(bench.panel, "none");
  bench.panel->steps_field()->setValue(100000);
  QSignalSpy ended(&bench.window, &MainWindow::sweepEnded);
  bench.panel->run_button()->click();
  wait_for_two_steps(bench.window, 2, 1, ended);
  ASSERT_TRUE(ended.isEmpty()) << bench.window.status_text().toStdString();
  const std::vector<pid_t> ranks = children_of_this_process();
  ASSERT_EQ(ranks.size(), 2u);
  bench.panel->stop_button()->click();
  ASSERT_TRUE(ended.wait(30000));
  EXPECT_EQ(ended.takeFirst().at(0).toString(), "cancelled");
  for (const pid_t rank : ranks) EXPECT_NE(::kill(rank, 0), 0) << "rank pid " << rank << " lives";
  EXPECT_TRUE(children_of_this_process().empty());
  RunStore store = bench.reader();
  ASSERT_EQ(store.runs().size(), 1u);
  EXPECT_EQ(store.runs()[0].status, RunStatus::kCancelled) << store.runs()[0].message;
  const QString status = bench.window.status_text();
  EXPECT_TRUE(status.startsWith("Stopped the run on 2 ranks")) << status.toStdString();
}

TEST(WindowRanks, ADataParallelRunIsRecordedUnderItsExperiment) {
  Bench bench;
  bench.panel->set_experiment_name("ranks study");
  bench.panel->batch_field()->setText("2");
  bench.panel->ranks_field()->setValue(2);
  bench.panel->steps_field()->setValue(3);
  ASSERT_EQ(bench.run_sweep(), "ok") << bench.window.status_text().toStdString();
  const auto runs = bench.reader().runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].config.world_size, 2);
  EXPECT_EQ(runs[0].experiment, "ranks study");
  ASSERT_TRUE(runs[0].experiment_id.has_value());
  // The Runs tab shows it under that experiment, which its filter offers.
  rematlab::ui::RunsView* view = bench.window.runs_view();
  view->select_experiment(*runs[0].experiment_id);
  EXPECT_EQ(view->selected_experiment(), *runs[0].experiment_id);
  EXPECT_EQ(view->row_count(), 1);
  bool offered = false;
  for (const QComboBox* filter : view->findChildren<QComboBox*>()) {
    offered = offered || filter->currentText().contains("ranks study");
  }
  EXPECT_TRUE(offered) << "the experiment filter does not show the run's experiment";
  QAbstractItemModel* model = view->table()->model();
  for (int c = 0; c < model->columnCount(); ++c) {
    if (model->headerData(c, Qt::Horizontal).toString() == "experiment") {
      EXPECT_EQ(model->index(0, c).data().toString(), "ranks study");
    }
  }
}

// Tensor ranks from the form: two ranks split each layer and the sequence; the run is recorded
// with that layout and both ranks' figures, each holding half the split parameters.
TEST(WindowRanks, ATensorParallelRunFromTheFormIsRecordedWithItsLayout) {
  Bench bench;
  bench.panel->batch_field()->setText("2");
  bench.panel->ranks_field()->setValue(2);
  bench.panel->tensor_ranks_field()->setValue(2);
  bench.panel->sequence_parallel_field()->setChecked(true);
  bench.panel->steps_field()->setValue(3);
  ASSERT_TRUE(bench.panel->problem().isEmpty()) << bench.panel->problem().toStdString();
  ASSERT_EQ(bench.run_sweep(), "ok") << bench.window.status_text().toStdString();
  const auto runs = bench.reader().runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].config.world_size, 2);
  EXPECT_EQ(runs[0].config.tp, 2);
  EXPECT_TRUE(runs[0].config.sequence_parallel);
  ASSERT_EQ(runs[0].result.ranks.size(), 2u);
  const int64_t whole = 4 * runs[0].config.model.parameter_count();
  for (const rematlab::RankResult& rank : runs[0].result.ranks) {
    EXPECT_LT(rank.param_bytes, whole) << "rank " << rank.rank << " holds the whole model";
    EXPECT_GT(rank.param_bytes, whole / 2 - whole / 8) << "rank " << rank.rank;
  }
}

// The form as two pipeline stages of one rank each train it: micro-batches of 2 rows, `accum`
// of them a step, `steps` steps.
void fill_two_stages(Bench& bench, int accum, int steps) {
  bench.panel->batch_field()->setText("2");
  bench.panel->ranks_field()->setValue(2);
  bench.panel->pipeline_stages_field()->setValue(2);
  bench.panel->accum_field()->setValue(accum);
  bench.panel->steps_field()->setValue(steps);
}

// Pipeline stages from the form: two ranks each run half the blocks in 1F1B order; the run is
// recorded with its stages and both ranks' figures, the first holding more activations (two
// micro-batches in flight against the last's one).
TEST(WindowRanks, APipelineRunFromTheFormIsRecordedWithItsStages) {
  Bench bench;
  fill_two_stages(bench, 4, 3);
  ASSERT_TRUE(bench.panel->problem().isEmpty()) << bench.panel->problem().toStdString();
  ASSERT_EQ(bench.run_sweep(), "ok") << bench.window.status_text().toStdString();
  const auto runs = bench.reader().runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].config.world_size, 2);
  EXPECT_EQ(runs[0].config.pp, 2);
  ASSERT_EQ(runs[0].result.ranks.size(), 2u);
  const rematlab::RankResult& first = runs[0].result.ranks[0];
  const rematlab::RankResult& last = runs[0].result.ranks[1];
  EXPECT_GT(first.peak_activation_bytes, last.peak_activation_bytes);
  const int64_t whole = 4 * runs[0].config.model.parameter_count();
  for (const rematlab::RankResult& rank : runs[0].result.ranks) {
    EXPECT_LT(rank.param_bytes, whole) << "rank " << rank.rank << " holds the whole model";
    EXPECT_GT(rank.grad_bytes, 0) << "rank " << rank.rank;
  }
}

// The form's Stage split: blocks per stage as --pp-split takes them, checked at its field, shown
// stage by stage in the preview, run and recorded; balanced is said to be chosen at the start.
TEST(WindowRanks, AStageSplitFromTheFormIsCheckedShownRunAndRecorded) {
  Bench bench;
  bench.panel->layers_field()->setValue(4);
  fill_two_stages(bench, 2, 1);
  QLineEdit* split = bench.panel->pipeline_split_field();
  split->setText("1,1");
  EXPECT_EQ(bench.panel->problem(), "Stage split: gives 2 blocks in all; the model has 4");
  EXPECT_TRUE(split->property("invalid").toBool());
  split->setText("3,x");
  EXPECT_TRUE(bench.panel->problem().startsWith("Stage split: '3,x' is not a list of block counts"))
      << bench.panel->problem().toStdString();
  split->setText("balanced");
  EXPECT_TRUE(bench.panel->problem().isEmpty()) << bench.panel->problem().toStdString();
  EXPECT_TRUE(bench.panel->segments_preview()->toPlainText().contains(
      "Stages (1F1B): 0: 2 in flight; 1: 1 in flight\nStage split: chosen when the run starts, "
      "from the blocks' measured times"))
      << bench.panel->segments_preview()->toPlainText().toStdString();
  split->setText("3,1");
  ASSERT_TRUE(bench.panel->problem().isEmpty()) << bench.panel->problem().toStdString();
  EXPECT_FALSE(split->property("invalid").toBool());
  EXPECT_TRUE(bench.panel->segments_preview()->toPlainText().contains(
      "Stages (1F1B): 0: blocks 0–2, 2 in flight; 1: blocks 3, 1 in flight"))
      << bench.panel->segments_preview()->toPlainText().toStdString();
  EXPECT_TRUE(bench.panel->summary().contains("blocks over 2 stages split 3,1"))
      << bench.panel->summary().toStdString();
  ASSERT_EQ(bench.run_sweep(), "ok") << bench.window.status_text().toStdString();
  const auto runs = bench.reader().runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].config.pp_split, (std::vector<int64_t>{3, 1}));
}

// The data ranks' buckets from the form: bad text is named at its field, and a run is recorded
// with the buckets its ranks reduced in.
TEST(WindowRanks, BucketsFromTheFormAreCheckedAndRecorded) {
  Bench bench;
  two_tiny_ranks(bench.panel, "gradients");
  bench.panel->steps_field()->setValue(2);
  QLineEdit* buckets = bench.panel->bucket_size_field();
  bench.panel->ranks_field()->setValue(1);  // named with one rank too, as run names it
  bench.panel->shard_field()->setCurrentText("none");
  buckets->setText("3furlongs");
  EXPECT_TRUE(bench.panel->problem().startsWith("Buckets: "))
      << bench.panel->problem().toStdString();
  two_tiny_ranks(bench.panel, "gradients");
  EXPECT_TRUE(bench.panel->problem().startsWith("Buckets: "))
      << bench.panel->problem().toStdString();
  EXPECT_TRUE(buckets->property("invalid").toBool());
  EXPECT_FALSE(bench.panel->can_start());
  buckets->setText("2TiB");
  EXPECT_TRUE(bench.panel->problem().startsWith("Buckets: must be between 1 byte and 1 TiB"))
      << bench.panel->problem().toStdString();
  buckets->setText("4KiB");
  ASSERT_TRUE(bench.panel->problem().isEmpty()) << bench.panel->problem().toStdString();
  EXPECT_FALSE(buckets->property("invalid").toBool());
  ASSERT_EQ(bench.run_sweep(), "ok") << bench.window.status_text().toStdString();
  const auto runs = bench.reader().runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].config.bucket_bytes, 4096);
  EXPECT_EQ(runs[0].config.shard, "gradients");
}

// Stages wait on one another inside a step, so a pipeline stops between steps: Stop says so, and
// the run ends cancelled with every rank gone.
TEST(WindowRanks, StopSaysAPipelineEndsAfterItsStepAndRecordsItCancelled) {
  Bench bench;
  fill_two_stages(bench, 4, 100000);
  QSignalSpy ended(&bench.window, &MainWindow::sweepEnded);
  bench.panel->run_button()->click();
  wait_for_two_steps(bench.window, 1, 0, ended);
  ASSERT_TRUE(ended.isEmpty()) << bench.window.status_text().toStdString();
  bench.panel->stop_button()->click();
  EXPECT_EQ(bench.window.status_text(), "Stopping the pipeline after its current step …");
  ASSERT_TRUE(ended.wait(30000));
  EXPECT_EQ(ended.takeFirst().at(0).toString(), "cancelled");
  EXPECT_TRUE(children_of_this_process().empty());
  const auto runs = bench.reader().runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, RunStatus::kCancelled) << runs[0].message;
}

// Tensor ranks that the ranks cannot hold are refused at the field, before Run.
TEST(WindowRanks, TensorRanksThatDoNotDivideTheRanksAreMarkedAtTheirField) {
  Bench bench;
  bench.panel->tensor_ranks_field()->setValue(2);
  EXPECT_TRUE(bench.panel->problem().contains("need a multiple of 2 ranks in all"))
      << bench.panel->problem().toStdString();
  EXPECT_TRUE(bench.panel->tensor_ranks_field()->property("invalid").toBool());
  bench.panel->ranks_field()->setValue(2);
  EXPECT_TRUE(bench.panel->problem().isEmpty()) << bench.panel->problem().toStdString();
  bench.panel->tensor_ranks_field()->setValue(1);
  bench.panel->sequence_parallel_field()->setChecked(true);
  EXPECT_TRUE(bench.panel->problem().contains("Tensor ranks 2 or more"))
      << bench.panel->problem().toStdString();
  EXPECT_TRUE(bench.panel->sequence_parallel_field()->property("invalid").toBool());
}

}  // namespace
