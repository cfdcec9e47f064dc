// The comparison through its real widgets, offscreen: which loss and memory curves coincide, a
// data-parallel run's memory per rank from its record, and a deleted run leaving it.
#include <qcustomplot.h>

#include <QLabel>
#include <QTableWidget>
#include <QTextDocument>

#include "compare_view.h"
#include "live_charts.h"
#include "rank_time_chart.h"
#include "runs_view.h"
#include "window_bench.h"

namespace {

using rematlab::RunStatus;
using rematlab::ui::testing::Bench;

TEST(Window, ADeletedRunLeavesCompare) {
  Bench bench;
  bench.panel->policies_field()->setText("none; every:1");
  ASSERT_EQ(bench.run_sweep(), "ok");
  const std::vector<int64_t> ids = bench.window.runs_view()->shown_ids();
  ASSERT_EQ(ids.size(), 2u);
  bench.window.compare({ids[0], ids[1]});
  ASSERT_EQ(bench.window.compare_view()->table()->rowCount(), 2);
  ASSERT_TRUE(bench.window.runs_view()->delete_runs({ids[0]}, /*confirmed=*/true));
  QTableWidget* table = bench.window.compare_view()->table();
  ASSERT_EQ(table->rowCount(), 1);
  EXPECT_TRUE(table->item(0, 0)->text().startsWith(QString("#%1 ").arg(ids[1])));
  EXPECT_EQ(bench.window.compare_view()->loss_chart()->graphCount(), 1);
  EXPECT_EQ(bench.window.compare_view()->comparison().pareto_front.size(), 1u);
}

TEST(CompareView, SaysWhichLossCurvesCoincide) {
  auto record = [](int64_t id) {
    rematlab::RunRecord run;
    run.id = id;
    run.name = "run";
    run.status = RunStatus::kOk;
    return run;
  };
  auto curve = [](std::vector<double> losses) {
    std::vector<rematlab::StepMetrics> steps;
    for (std::size_t i = 0; i < losses.size(); ++i) {
      steps.emplace_back();
      steps.back().step = static_cast<int64_t>(i);
      steps.back().loss = losses[i];
    }
    return steps;
  };
  rematlab::ui::CompareView view;
  view.set_runs({record(1), record(2), record(3)},
                {{1, curve({3.0, 2.0})}, {2, curve({3.0, 2.5})}, {3, curve({3.0, 2.0})}});
  EXPECT_EQ(view.coincide_text(),
            "#3 has exactly the loss of #1: its curve (dashed) lies on top of it.");
  EXPECT_FALSE(view.loss_chart()->graph(1)->name().contains("coincides"));
  EXPECT_TRUE(view.loss_chart()->graph(2)->name().contains("coincides with #1"));
  view.set_runs({record(1), record(2)}, {{1, curve({3.0, 2.0})}, {2, curve({3.0, 2.5})}});
  EXPECT_TRUE(view.coincide_text().isEmpty());
}

// Selective under fused attention keeps what none keeps, but for the few KiB of RNG state a
// recomputed segment saves: the memory curves lie on each other and say so, as losses do.
TEST(CompareView, SaysWhichMemoryCurvesCoincide) {
  auto record = [](int64_t id) {
    rematlab::RunRecord run;
    run.id = id;
    run.name = "run";
    run.status = RunStatus::kOk;
    return run;
  };
  auto peaks = [](std::vector<int64_t> bytes, double loss) {
    std::vector<rematlab::StepMetrics> steps;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      steps.emplace_back();
      steps.back().step = static_cast<int64_t>(i);
      steps.back().peak_bytes = bytes[i];
      steps.back().loss = loss - static_cast<double>(i);
    }
    return steps;
  };
  const int64_t mib = 1 << 20;
  rematlab::ui::CompareView view;
  view.set_runs({record(1), record(2), record(3)},
                {{1, peaks({8 * mib, 9 * mib}, 5.0)},
                 {2, peaks({8 * mib + 5056, 9 * mib + 5056}, 4.0)},
                 {3, peaks({5 * mib, 6 * mib}, 5.0)}});
  EXPECT_TRUE(view.coincide_text().contains("#2 has the peak memory of #1 at every step"))
      << view.coincide_text().toStdString();
  EXPECT_FALSE(view.coincide_text().contains("#3 has the peak memory"));
  QCustomPlot* memory = view.step_memory_chart();
  ASSERT_EQ(memory->graphCount(), 3);
  EXPECT_TRUE(memory->graph(1)->name().endsWith("(coincides with #1)"))
      << memory->graph(1)->name().toStdString();
  EXPECT_EQ(memory->graph(1)->pen().style(), Qt::DashLine);
  EXPECT_EQ(memory->graph(2)->pen().style(), Qt::SolidLine);
}

TEST(CompareView, ADataParallelRunHasOneMemoryCurvePerRankFromItsRecord) {
  // A recorded two-rank run (its ranks' figures as the database keeps them) beside a plain run.
  rematlab::RunRecord parallel;
  parallel.id = 7;
  parallel.status = RunStatus::kOk;
  parallel.has_result = true;
  parallel.result.steps_completed = 3;
  parallel.config.world_size = 2;
  for (int rank = 0; rank < 2; ++rank) {
    rematlab::RankResult figures;
    figures.rank = rank;
    figures.step_peak_bytes = {(10 + rank) << 20, (20 + rank) << 20, (30 + rank) << 20};
    parallel.result.ranks.push_back(figures);
  }
  rematlab::RunRecord alone;
  alone.id = 8;
  alone.status = RunStatus::kOk;
  alone.has_result = true;
  alone.result.steps_completed = 2;
  std::vector<rematlab::StepMetrics> steps(2);
  steps[0].peak_bytes = int64_t{5} << 20;
  steps[1].step = 1;
  steps[1].peak_bytes = int64_t{6} << 20;

  rematlab::ui::CompareView view;
  view.set_runs({parallel, alone}, {{8, steps}});
  QCustomPlot* chart = view.step_memory_chart();
  ASSERT_EQ(chart->graphCount(), 3);
  for (int rank = 0; rank < 2; ++rank) {
    QCPGraph* curve = chart->graph(rank);
    EXPECT_TRUE(curve->name().endsWith(QString("rank %1").arg(rank)))
        << curve->name().toStdString();
    ASSERT_EQ(curve->dataCount(), 3);
    for (int step = 0; step < 3; ++step) {
      EXPECT_EQ(curve->data()->at(step)->key, step + 1);
      EXPECT_EQ(curve->data()->at(step)->value, 10.0 * (step + 1) + rank);  // MiB
    }
  }
  // The ranks of one run share its colour; the plain run has one curve of its steps.
  EXPECT_EQ(chart->graph(0)->pen().color(), chart->graph(1)->pen().color());
  EXPECT_NE(chart->graph(0)->pen().style(), chart->graph(1)->pen().style());
  ASSERT_EQ(chart->graph(2)->dataCount(), 2);
  EXPECT_EQ(chart->graph(2)->data()->at(1)->value, 6.0);
}

// Where each rank's step went, from its record: computing under its waits, a pipeline's bubble
// and transfers apart from the other collectives', stacked; a run of one process draws nothing.
TEST(CompareView, APipelineRunsRanksShowTheirComputingBubbleTransfersAndOtherWaits) {
  rematlab::RunRecord pipeline;
  pipeline.id = 4;
  pipeline.status = RunStatus::kOk;
  pipeline.has_result = true;
  pipeline.result.steps_completed = 3;
  pipeline.config.world_size = 2;
  pipeline.config.pp = 2;
  for (int rank = 0; rank < 2; ++rank) {
    rematlab::RankResult figures;
    figures.rank = rank;
    figures.step_ms = 100.0;
    figures.comm_wait_ms = 30.0 + rank;
    figures.bubble_ms = 20.0 - rank;
    figures.transfer_ms = 5.0;
    pipeline.result.ranks.push_back(figures);
  }
  rematlab::RunRecord alone;
  alone.id = 5;
  alone.status = RunStatus::kOk;
  alone.has_result = true;
  alone.result.steps_completed = 2;

  rematlab::ui::CompareView view;
  view.set_runs({alone, pipeline}, {});
  QCustomPlot* chart = view.rank_time_chart();
  ASSERT_EQ(chart->plottableCount(), 5);
  // From the axis up: computing, bubble, transfers, all-to-all (none in a pipeline), other
  // collectives; rank 1 beside rank 0.
  const std::vector<std::vector<double>> expected = {
      {70.0, 69.0}, {20.0, 19.0}, {5.0, 5.0}, {0.0, 0.0}, {5.0, 7.0}};
  QCPBars* below = nullptr;
  for (int part = 0; part < 5; ++part) {
    auto* bars = qobject_cast<QCPBars*>(chart->plottable(part));
    ASSERT_NE(bars, nullptr);
    EXPECT_EQ(bars->barBelow(), below) << part;
    ASSERT_EQ(bars->dataCount(), 2);
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_DOUBLE_EQ(bars->data()->at(rank)->value, expected[part][rank]) << part;
    }
    EXPECT_EQ(bars->data()->at(1)->key - bars->data()->at(0)->key, 1.0);
    // The pipeline run is the second given: its colour, not the first run's.
    EXPECT_EQ(bars->brush().color().hue(), rematlab::ui::run_colour(1).hue()) << part;
    below = bars;
  }
  auto* ticker = dynamic_cast<QCPAxisTickerText*>(chart->xAxis->ticker().data());
  ASSERT_NE(ticker, nullptr);
  EXPECT_EQ(ticker->ticks().first(), "#4\nr0");
  EXPECT_EQ(ticker->ticks().last(), "#4\nr1");

  // Medians need not add up: what is left over never goes below zero.
  rematlab::RankResult odd;
  odd.step_ms = 10.0;
  odd.comm_wait_ms = 4.0;
  odd.bubble_ms = 6.0;
  EXPECT_DOUBLE_EQ(rematlab::ui::rank_time_ms(odd, rematlab::ui::RankTimePart::kComputing), 4.0);
  EXPECT_DOUBLE_EQ(rematlab::ui::rank_time_ms(odd, rematlab::ui::RankTimePart::kCollectives), 0.0);

  view.set_runs({alone}, {});
  EXPECT_EQ(view.rank_time_chart()->plottableCount(), 0);
}

// Expert parallelism: each rank's all-to-all is its own part of the bar, within its waits; each
// mixture-of-experts run's expert load per step is drawn dotted on the loss chart's right axis,
// which a comparison without experts does not show.
TEST(CompareView, ExpertRanksShowTheirAllToAllAndTheLoadIsDrawnBesideTheLoss) {
  rematlab::RunRecord experts;
  experts.id = 7;
  experts.status = RunStatus::kOk;
  experts.has_result = true;
  experts.result.steps_completed = 3;
  experts.config.world_size = 2;
  experts.config.ep = 2;
  for (int rank = 0; rank < 2; ++rank) {
    rematlab::RankResult figures;
    figures.rank = rank;
    figures.step_ms = 50.0;
    figures.comm_wait_ms = 20.0;
    figures.dispatch_ms = 12.0 + rank;
    experts.result.ranks.push_back(figures);
  }
  rematlab::RunRecord dense;
  dense.id = 8;
  dense.status = RunStatus::kOk;
  dense.has_result = true;
  dense.result.steps_completed = 3;
  std::map<int64_t, std::vector<rematlab::StepMetrics>> steps;
  for (int step = 0; step < 3; ++step) {
    rematlab::StepMetrics metrics;
    metrics.step = step;
    metrics.loss = 5.0 - step;
    steps[8].push_back(metrics);
    metrics.expert_load = 1.5 - 0.1 * step;
    steps[7].push_back(metrics);
  }

  rematlab::ui::CompareView view;
  view.set_runs({experts, dense}, steps);
  QCustomPlot* ranks = view.rank_time_chart();
  ASSERT_EQ(ranks->plottableCount(), 5);
  auto* all_to_all = qobject_cast<QCPBars*>(ranks->plottable(3));
  ASSERT_NE(all_to_all, nullptr);
  EXPECT_EQ(all_to_all->name(), "all-to-all");
  EXPECT_DOUBLE_EQ(all_to_all->data()->at(0)->value, 12.0);
  EXPECT_DOUBLE_EQ(all_to_all->data()->at(1)->value, 13.0);
  auto* other = qobject_cast<QCPBars*>(ranks->plottable(4));
  EXPECT_DOUBLE_EQ(other->data()->at(0)->value, 8.0);
  EXPECT_DOUBLE_EQ(qobject_cast<QCPBars*>(ranks->plottable(0))->data()->at(0)->value, 30.0);
  // The key names what these ranks did: no pipeline's bubble or transfers.
  QStringList keyed;
  for (int item = 0; item < ranks->legend->itemCount(); ++item) {
    auto* entry = qobject_cast<QCPPlottableLegendItem*>(ranks->legend->item(item));
    if (entry) keyed << entry->plottable()->name();
  }
  EXPECT_EQ(keyed, QStringList({"compute", "all-to-all", "other"}));

  QCustomPlot* losses = view.loss_chart();
  ASSERT_EQ(losses->graphCount(), 3);  // two losses, one load
  QCPGraph* load = losses->graph(2);
  EXPECT_EQ(load->valueAxis(), losses->yAxis2);
  ASSERT_EQ(load->dataCount(), 3);
  EXPECT_DOUBLE_EQ(load->data()->at(0)->value, 1.5);
  EXPECT_EQ(load->pen().style(), Qt::DotLine);
  EXPECT_TRUE(losses->yAxis2->visible());
  EXPECT_LE(losses->yAxis2->range().lower, 1.0);
  EXPECT_GE(losses->yAxis2->range().upper, 1.5);

  view.set_runs({dense}, steps);
  EXPECT_EQ(view.loss_chart()->graphCount(), 1);
  EXPECT_FALSE(view.loss_chart()->yAxis2->visible());
}

// A warning names settings from the record, which a hand edit can fill with anything: a name
// that looks like a tag is shown as the text it is, on the label and in its tooltip.
TEST(CompareView, AWarningNamingASettingThatLooksLikeATagShowsItAsText) {
  rematlab::RunRecord run;
  run.id = 4;
  run.name = "run";
  run.status = RunStatus::kOk;
  run.unread_config_fields = {"<b>bold</b>"};
  rematlab::ui::CompareView view;
  view.set_runs({run}, {});
  ASSERT_TRUE(view.warnings_text().contains("<b>bold</b>")) << view.warnings_text().toStdString();
  QLabel* warnings = nullptr;
  for (QLabel* each : view.findChildren<QLabel*>())
    if (each->text() == view.warnings_text()) warnings = each;
  ASSERT_NE(warnings, nullptr);
  EXPECT_EQ(warnings->textFormat(), Qt::PlainText);
  QTextDocument tooltip;
  tooltip.setHtml(warnings->toolTip());
  EXPECT_TRUE(Qt::mightBeRichText(warnings->toolTip()));
  EXPECT_TRUE(tooltip.toPlainText().contains("<b>bold</b>")) << warnings->toolTip().toStdString();
}

}  // namespace
