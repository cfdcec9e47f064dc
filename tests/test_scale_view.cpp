// The Scale tab through its real widgets, offscreen: a search from the fields whose list, chart,
// grid, bar and exports are the layout planner's own answer; the article's case where nothing
// fits; a bad field; a GPU kind's server; the exports copied and saved whole; one search at a
// time; and "Try it here" handing a layout the engine runs to the form.
#include <qcustomplot.h>

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <nlohmann/json.hpp>

#include "layout/layout_export.h"
#include "layout/layout_search.h"
#include "memory_bar.h"
#include "scale_view.h"
#include "window_bench.h"

namespace {

namespace layout = rematlab::layout;
using rematlab::ui::ScaleView;
using rematlab::ui::testing::Bench;
using rematlab::ui::testing::show_at;

void fill(ScaleView* view, const char* model, const char* gpu, int gpus, int seq_len, int batch) {
  view->model_field()->setCurrentText(model);
  view->gpu_field()->setCurrentText(gpu);
  view->gpus_field()->setValue(gpus);
  view->gpus_per_node_field()->setValue(8);
  view->seq_len_field()->setValue(seq_len);
  view->global_batch_field()->setValue(batch);
}

// Plans the fields' request and waits for the search's answer.
bool plan_and_wait(ScaleView* view) {
  QSignalSpy finished(view, &ScaleView::searchFinished);
  if (!view->plan()) return false;
  if (!finished.wait(60000)) return false;
  return finished.takeFirst().at(0).toBool();
}

int points_drawn(QCustomPlot* chart, const QString& name) {
  for (int i = 0; i < chart->graphCount(); ++i) {
    if (chart->graph(i)->name() == name) return chart->graph(i)->data()->size();
  }
  return -1;
}

TEST(ScaleView, PlanShowsThePlannersAnswerInEveryPart) {
  Bench bench;
  show_at(bench.window, 1280, 720);
  ScaleView* view = bench.window.scale_view();
  bench.window.tabs()->setCurrentWidget(view);
  fill(view, "llama2-70b", "a100-80gb", 64, 4096, 1024);
  QSignalSpy finished(view, &ScaleView::searchFinished);
  view->plan_button()->click();
  EXPECT_FALSE(view->plan_button()->isEnabled());  // while it searches
  ASSERT_TRUE(finished.wait(60000));
  EXPECT_TRUE(view->plan_button()->isEnabled());
  ASSERT_TRUE(view->answer().has_value()) << view->status().toStdString();

  // The same request through core gives the same answer.
  const layout::LayoutAnswer expected = layout::search_layouts(*view->request());
  ASSERT_FALSE(expected.best.empty());
  EXPECT_EQ(view->layout_list()->rowCount(), static_cast<int>(expected.best.size()));
  EXPECT_EQ(view->layout_list()->item(0, 0)->text().toStdString(),
            layout::layout_name(expected.best.front().layout));
  EXPECT_EQ(view->layout_list()->item(0, 5)->text(), "fits");
  int64_t fitting = 0;
  for (const auto& point : expected.points) fitting += point.fits ? 1 : 0;
  EXPECT_EQ(points_drawn(view->frontier_chart(), "fits"), fitting);
  EXPECT_EQ(points_drawn(view->frontier_chart(), "does not fit"),
            static_cast<int>(expected.points.size() - fitting));
  EXPECT_EQ(points_drawn(view->frontier_chart(), "frontier"),
            static_cast<int>(expected.frontier.size()));
  EXPECT_TRUE(view->status().contains(QString("%1 layouts evaluated").arg(expected.points.size())));

  // The grid's cell of the best layout's degrees holds its tokens/s; the bar its memory.
  const auto& best = expected.best.front();
  QTableWidget* grid = view->degree_grid();
  int row = -1, column = -1;
  for (int r = 0; r < grid->rowCount(); ++r) {
    if (grid->verticalHeaderItem(r)->text() == QString("TP %1").arg(best.layout.tp)) row = r;
  }
  for (int c = 0; c < grid->columnCount(); ++c) {
    if (grid->horizontalHeaderItem(c)->text() == QString("PP %1").arg(best.layout.pp)) column = c;
  }
  ASSERT_GE(row, 0);
  ASSERT_GE(column, 0);
  EXPECT_EQ(grid->item(row, column)->text(),
            QString::number(best.tokens_per_s / 1000.0, 'f', 1) + "k");
  EXPECT_EQ(view->memory_bar()->total_bytes(), best.memory.total());
  EXPECT_EQ(view->memory_bar()->capacity_bytes(), view->request()->cluster.gpu.memory_bytes);
  EXPECT_EQ(view->memory_bar()->parts().size(), 7u);

  // Exports: the chosen layout in each tool's terms.
  EXPECT_EQ(view->export_text().section('\n', 0, 0).toStdString(),
            layout::megatron_arguments(*view->request(), best).text);
  view->export_choice()->setCurrentIndex(2);
  EXPECT_TRUE(view->export_text().contains("\"zero_optimization\""));
  // A pipeline or context layout is predicted only: the engine cannot try it, and its RematLab
  // export is empty, which Copy and Save do not offer.
  EXPECT_EQ(view->try_button()->isEnabled(), best.engine_lacks.empty());
  view->export_choice()->setCurrentIndex(3);
  const bool runs = !layout::rematlab_run(*view->request(), best).text.empty();
  EXPECT_EQ(view->copy_button()->isEnabled(), runs);

  // Choosing another row shows that one.
  view->choose(1);
  EXPECT_EQ(view->chosen()->step_s, expected.best[1].step_s);

  // Hovering the best layout's point says what it is.
  QCustomPlot* chart = view->frontier_chart();
  const QPointF pixel(chart->xAxis->coordToPixel(best.memory.total() / 1073741824.0),
                      chart->yAxis->coordToPixel(best.tokens_per_s));
  EXPECT_FALSE(view->describe_point_at(pixel).isEmpty());
}

TEST(ScaleView, TheArticlesCaseListsWhatTheNearestLack) {
  Bench bench;
  ScaleView* view = bench.window.scale_view();
  fill(view, "gpt3-175b", "a100-40gb", 8, 2048, 8);
  view->host_memory_field()->setValue(1024);
  ASSERT_TRUE(plan_and_wait(view));
  EXPECT_TRUE(view->answer()->best.empty());
  ASSERT_GT(view->layout_list()->rowCount(), 0);
  EXPECT_NE(view->layout_list()->item(0, 5)->text(), "fits");
  EXPECT_TRUE(view->status().contains("Nothing fits")) << view->status().toStdString();
  EXPECT_TRUE(view->status().contains("of host memory per node")) << view->status().toStdString();
  EXPECT_FALSE(view->try_button()->isEnabled());
}

// The article's first case at the layout's scale: Llama 3 8B fine-tuned with LoRA on one
// 24 GiB card. In full it does not fit there; with an nf4 base it does, and the bar holds the
// planner's figures for the same request.
TEST(ScaleView, LoraOnANf4BaseFitsWhereFullTrainingDoesNot) {
  Bench bench;
  ScaleView* view = bench.window.scale_view();
  fill(view, "llama3-8b", "rtx4090", 1, 4096, 8);
  view->gpus_per_node_field()->setValue(1);
  view->host_memory_field()->setValue(64);  // no room for the full model's states on the host
  ASSERT_TRUE(plan_and_wait(view));
  EXPECT_TRUE(view->answer()->best.empty()) << view->status().toStdString();
  view->train_field()->setCurrentText("LoRA nf4");
  ASSERT_TRUE(plan_and_wait(view));
  ASSERT_FALSE(view->answer()->best.empty()) << view->status().toStdString();
  ASSERT_TRUE(view->request()->arch.lora.enabled());
  EXPECT_EQ(view->request()->arch.lora.base, rematlab::BasePrecision::kNf4);
  const layout::LayoutAnswer expected = layout::search_layouts(*view->request());
  ASSERT_FALSE(expected.best.empty());
  EXPECT_EQ(view->memory_bar()->total_bytes(), expected.best.front().memory.total());
  EXPECT_EQ(view->layout_list()->item(0, 5)->text(), "fits");
  // Megatron-LM has no adapters: its export says so.
  EXPECT_TRUE(view->export_text().contains("LoRA fine-tuning"))
      << view->export_text().toStdString();
  // A bf16 base with fp32 matmuls is one line naming the field.
  view->train_field()->setCurrentText("LoRA bf16");
  view->precision_field()->setCurrentText("fp32");
  EXPECT_FALSE(view->plan());
  EXPECT_EQ(view->status(), "Train: a bf16 base needs bf16 matmuls: give Precision bf16");
}

TEST(ScaleView, ABadFieldSaysWhyAndDrawsNothing) {
  Bench bench;
  ScaleView* view = bench.window.scale_view();
  fill(view, "llama2-70b", "a100-80gb", 12, 4096, 1024);
  view->gpus_per_node_field()->setValue(8);  // 12 GPUs are not whole nodes of 8
  EXPECT_FALSE(view->plan());
  EXPECT_TRUE(view->status().startsWith("GPUs: ")) << view->status().toStdString();
  EXPECT_FALSE(view->answer().has_value());
  EXPECT_EQ(view->layout_list()->rowCount(), 0);
  EXPECT_EQ(view->chosen(), nullptr);
}

TEST(ScaleView, AGpuKindBringsItsUsualServer) {
  Bench bench;
  ScaleView* view = bench.window.scale_view();
  for (const char* name : {"rtx4090", "h100-sxm", "a100-40gb"}) {
    view->gpu_field()->setCurrentText(name);
    const layout::GpuKind& kind = layout::gpu_kind(name);
    EXPECT_EQ(view->gpus_per_node_field()->value(), kind.gpus_per_node) << name;
    EXPECT_EQ(int64_t{view->host_memory_field()->value()} << 30, kind.host_memory_bytes) << name;
  }
}

TEST(ScaleView, OneSearchAtATimeAndTheExportCopiedAndSavedWhole) {
  Bench bench;
  ScaleView* view = bench.window.scale_view();
  fill(view, "small", "rtx4090", 4, 256, 16);
  view->gpus_per_node_field()->setValue(4);
  QSignalSpy finished(view, &ScaleView::searchFinished);
  ASSERT_TRUE(view->plan());
  EXPECT_FALSE(view->plan());  // a second Plan while the first searches starts nothing
  ASSERT_TRUE(finished.wait(60000));
  QTest::qWait(50);
  EXPECT_EQ(finished.count(), 1);
  ASSERT_TRUE(view->answer().has_value());

  // DeepSpeed's JSON, copied and saved, parses: the notes under it stay in the window.
  view->export_choice()->setCurrentIndex(2);
  ASSERT_TRUE(view->export_text().contains("# no equivalent"));
  view->copy_button()->click();
  const QString copied = QApplication::clipboard()->text();
  EXPECT_TRUE(nlohmann::json::accept(copied.toStdString())) << copied.toStdString();
  EXPECT_TRUE(view->export_text().startsWith(copied));
  QTemporaryDir dir;
  const QString path = dir.filePath("layout.json");
  ASSERT_TRUE(view->save_export(path)) << view->status().toStdString();
  QFile saved(path);
  ASSERT_TRUE(saved.open(QIODevice::ReadOnly));
  EXPECT_EQ(QString::fromUtf8(saved.readAll()), copied);
  EXPECT_TRUE(view->status().startsWith("Saved the DeepSpeed export"))
      << view->status().toStdString();
  // Into a folder that does not exist: said, and nothing left behind.
  EXPECT_FALSE(view->save_export(dir.filePath("missing/layout.json")));
  EXPECT_TRUE(view->status().startsWith("Could not save")) << view->status().toStdString();
  EXPECT_EQ(QDir(dir.path()).entryList(QDir::NoDotAndDotDot | QDir::AllEntries),
            QStringList{"layout.json"});
}

// `small` at fp32 on `gpus` consumer GPUs of one node, searched among the layouts the engine
// runs; true once its answer is listed.
bool plan_runnable_small(ScaleView* view, int gpus, int global_batch) {
  fill(view, "small", "rtx4090", gpus, 256, global_batch);
  view->gpus_per_node_field()->setValue(gpus);
  view->precision_field()->setCurrentText("fp32");
  view->runnable_here_field()->setChecked(true);
  return plan_and_wait(view);
}

TEST(ScaleView, TryItHereGivesTheFormTheLayout) {
  Bench bench;
  ScaleView* view = bench.window.scale_view();
  ASSERT_TRUE(plan_runnable_small(view, 4, 16));
  ASSERT_FALSE(view->listed().empty());
  for (const auto& listed : view->listed()) EXPECT_TRUE(listed.engine_lacks.empty());
  view->choose(static_cast<int>(view->listed().size()) - 1);
  ASSERT_TRUE(view->try_button()->isEnabled());
  view->try_button()->click();
  const layout::Layout& chosen = view->chosen()->layout;
  EXPECT_EQ(bench.panel->ranks_field()->value(), chosen.tp * chosen.pp * chosen.dp);
  EXPECT_EQ(bench.panel->tensor_ranks_field()->value(), chosen.tp);
  EXPECT_EQ(bench.panel->pipeline_stages_field()->value(), chosen.pp);
  EXPECT_EQ(bench.panel->sequence_parallel_field()->isChecked(), chosen.sp);
  EXPECT_EQ(bench.panel->policies_field()->text().toStdString(), chosen.stage_checkpoints[0]);
  const char* shard[] = {"none", "optimizer", "gradients", "parameters"};
  EXPECT_EQ(bench.panel->shard_field()->currentText(), chosen.dp > 1 ? shard[chosen.zero] : "none");
  EXPECT_TRUE(bench.panel->first_config().has_value());  // the form takes it as it is
}

TEST(ScaleView, TryItHereGivesTheFormAPipelineWithItsMicroBatches) {
  Bench bench;
  ScaleView* view = bench.window.scale_view();
  // Two GPUs: one pipeline of two stages, which the engine runs.
  ASSERT_TRUE(plan_runnable_small(view, 2, 8));
  int pipelined = -1;
  for (std::size_t i = 0; i < view->listed().size(); ++i) {
    EXPECT_TRUE(view->listed()[i].engine_lacks.empty());
    if (view->listed()[i].layout.pp == 2 && pipelined < 0) pipelined = static_cast<int>(i);
  }
  ASSERT_GE(pipelined, 0) << "no two-stage layout listed";
  view->choose(pipelined);
  ASSERT_TRUE(view->try_button()->isEnabled());
  bench.panel->pipeline_split_field()->setText("5,7");  // the planner splits by the rule
  view->try_button()->click();
  EXPECT_TRUE(bench.panel->pipeline_split().isEmpty());
  const layout::Layout& chosen = view->chosen()->layout;
  EXPECT_EQ(bench.panel->ranks_field()->value(), 2);
  EXPECT_EQ(bench.panel->pipeline_stages_field()->value(), 2);
  EXPECT_EQ(bench.panel->accum_field()->value(), chosen.accum);
  EXPECT_TRUE(bench.panel->first_config().has_value());  // the form takes it as it is
  EXPECT_TRUE(bench.panel->problem().isEmpty()) << bench.panel->problem().toStdString();
}

// Balanced, the search splits every pipeline by its blocks' predicted times, and Try it here has
// the form balance its own model's stages (the planned model's list would not fit it).
TEST(ScaleView, BalancedStagesArePlannedAndTriedBalanced) {
  Bench bench;
  ScaleView* view = bench.window.scale_view();
  view->balanced_split_field()->setChecked(true);
  ASSERT_TRUE(plan_runnable_small(view, 2, 8));
  EXPECT_TRUE(view->request()->fixed.pp_split_balanced);
  int pipelined = -1;
  for (std::size_t i = 0; i < view->listed().size() && pipelined < 0; ++i) {
    if (view->listed()[i].layout.pp == 2 && view->listed()[i].layout.stage_checkpoints[0] ==
                                                view->listed()[i].layout.stage_checkpoints[1]) {
      pipelined = static_cast<int>(i);
    }
  }
  ASSERT_GE(pipelined, 0) << "no two-stage layout of one policy listed";
  view->choose(pipelined);
  view->try_button()->click();
  EXPECT_EQ(bench.panel->pipeline_split(), "balanced");
  EXPECT_TRUE(bench.panel->problem().isEmpty()) << bench.panel->problem().toStdString();
  // Unchecked, the rule's split: the form's is cleared.
  view->balanced_split_field()->setChecked(false);
  ASSERT_TRUE(plan_runnable_small(view, 2, 8));
  int rule = -1;
  for (std::size_t i = 0; i < view->listed().size() && rule < 0; ++i) {
    if (view->listed()[i].layout.pp == 2) rule = static_cast<int>(i);
  }
  ASSERT_GE(rule, 0) << "no two-stage layout listed";
  view->choose(rule);
  view->try_button()->click();
  EXPECT_EQ(bench.panel->pipeline_split(), "");
}

TEST(ScaleView, TryItHereGivesTheFormPipelinesThatShardTheirStagesOptimizerStates) {
  Bench bench;
  ScaleView* view = bench.window.scale_view();
  // Four GPUs: two pipelines of two stages, ZeRO 1 over each stage's two data ranks.
  ASSERT_TRUE(plan_runnable_small(view, 4, 16));
  int sharded = -1;
  for (std::size_t i = 0; i < view->listed().size() && sharded < 0; ++i) {
    const layout::Layout& each = view->listed()[i].layout;
    if (each.pp == 2 && each.dp == 2 && each.zero == 1) sharded = static_cast<int>(i);
  }
  ASSERT_GE(sharded, 0) << "no sharded two-stage layout listed";
  view->choose(sharded);
  ASSERT_TRUE(view->try_button()->isEnabled());
  view->try_button()->click();
  EXPECT_EQ(bench.panel->ranks_field()->value(), 4);
  EXPECT_EQ(bench.panel->pipeline_stages_field()->value(), 2);
  EXPECT_EQ(bench.panel->shard_field()->currentText(), "optimizer");
  EXPECT_TRUE(bench.panel->first_config().has_value());  // the form takes it as it is
  EXPECT_TRUE(bench.panel->problem().isEmpty()) << bench.panel->problem().toStdString();
}

// The Buckets field: planned, exported and tried in the same values (run counts fp32 bytes); bad
// text or less than one gradient said at the field, nothing planned.
TEST(ScaleView, TheBucketsArePlannedExportedAndTriedAlike) {
  Bench bench;
  ScaleView* view = bench.window.scale_view();
  view->buckets_field()->setText("3furlongs");
  EXPECT_FALSE(plan_runnable_small(view, 4, 16));
  EXPECT_TRUE(view->status().startsWith("Buckets: ")) << view->status().toStdString();
  view->precision_field()->setCurrentText("bf16");
  view->buckets_field()->setText("1");
  EXPECT_FALSE(view->plan());
  EXPECT_TRUE(view->status().startsWith("Buckets: must be between one gradient (2 bytes)"))
      << view->status().toStdString();
  EXPECT_FALSE(view->answer().has_value());

  view->buckets_field()->setText("4MiB");  // fp32: 1 Mi values
  ASSERT_TRUE(plan_runnable_small(view, 4, 16));
  EXPECT_EQ(view->request()->bucket_values, int64_t{1} << 20);
  int data_parallel = -1;
  for (std::size_t i = 0; i < view->listed().size() && data_parallel < 0; ++i) {
    // Data ranks, in model chunks the form's two blocks can fill (Try it here keeps its model).
    const layout::Layout& listed = view->listed()[i].layout;
    if (listed.dp > 1 && listed.pp * listed.vp <= 2) data_parallel = static_cast<int>(i);
  }
  ASSERT_GE(data_parallel, 0) << "no layout with data ranks listed";
  view->choose(data_parallel);
  view->export_choice()->setCurrentIndex(3);  // RematLab run
  EXPECT_TRUE(view->export_text().contains("--bucket-size 4194304"))
      << view->export_text().toStdString();
  view->try_button()->click();
  EXPECT_EQ(bench.panel->bucket_size(), "4194304");
  EXPECT_TRUE(bench.panel->problem().isEmpty()) << bench.panel->problem().toStdString();
  // Emptied: Megatron-LM's 40M values again; a layout of one data rank clears the form's.
  view->buckets_field()->clear();
  ASSERT_TRUE(plan_runnable_small(view, 1, 4));
  EXPECT_EQ(view->request()->bucket_values, layout::kBucketValues);
  view->try_button()->click();
  EXPECT_EQ(bench.panel->bucket_size(), "");
}

TEST(ScaleView, AMixtureOfExpertsIsPlannedWithExpertRanksTheFormCannotTryYet) {
  Bench bench;
  ScaleView* view = bench.window.scale_view();
  fill(view, "mixtral-8x7b", "h100-sxm", 64, 4096, 512);
  ASSERT_TRUE(plan_and_wait(view)) << view->status().toStdString();
  const layout::LayoutAnswer expected = layout::search_layouts(*view->request());
  ASSERT_FALSE(expected.best.empty());
  EXPECT_EQ(view->memory_bar()->total_bytes(), expected.best.front().memory.total());
  EXPECT_GT(view->listed().front().layout.ep, 1);
  EXPECT_TRUE(view->layout_list()->item(0, 0)->text().contains(" EP "))
      << view->layout_list()->item(0, 0)->text().toStdString();
  // Its grid's rows are expert degrees (at TP 1), then tensor degrees (each expert split by
  // width, at EP 1); the best's cell its tokens/s.
  QTableWidget* grid = view->degree_grid();
  QStringList rows;
  for (int r = 0; r < grid->rowCount(); ++r) rows << grid->verticalHeaderItem(r)->text();
  EXPECT_EQ(rows, QStringList({"EP 1", "EP 2", "EP 4", "EP 8", "TP 2", "TP 4", "TP 8"}));
  const layout::Layout& best = expected.best.front().layout;
  int best_row = static_cast<int>(rows.indexOf(QString("EP %1").arg(best.ep)));
  int best_column = -1;
  for (int c = 0; c < grid->columnCount(); ++c) {
    if (grid->horizontalHeaderItem(c)->text() == QString("PP %1").arg(best.pp)) best_column = c;
  }
  ASSERT_GE(best_row, 0);
  ASSERT_GE(best_column, 0);
  const double tokens_k = expected.best.front().tokens_per_s / 1000.0;
  EXPECT_EQ(grid->item(best_row, best_column)->text(), QString::number(tokens_k, 'f', 1) + "k");
  // Adapters on experts are not built: said at the Train field, nothing planned.
  view->train_field()->setCurrentText("LoRA nf4");
  EXPECT_FALSE(view->plan());
  EXPECT_EQ(view->status(), "Train: adapters on experts are not built (train the model whole)");
  view->train_field()->setCurrentText("full");
  // Among the layouts the engine runs, one with expert ranks goes to `run --ep`, not the form.
  fill(view, "moe-tiny", "rtx4090", 4, 128, 16);
  view->gpus_per_node_field()->setValue(4);
  view->precision_field()->setCurrentText("fp32");
  view->runnable_here_field()->setChecked(true);
  ASSERT_TRUE(plan_and_wait(view)) << view->status().toStdString();
  int split = -1;
  for (std::size_t i = 0; i < view->listed().size() && split < 0; ++i) {
    if (view->listed()[i].layout.ep > 1) split = static_cast<int>(i);
  }
  ASSERT_GE(split, 0) << "no expert-parallel layout listed";
  view->choose(split);
  EXPECT_FALSE(view->try_button()->isEnabled());
  EXPECT_TRUE(view->try_button()->toolTip().contains("expert ranks"));
  EXPECT_TRUE(view->export_text().contains("--expert-model-parallel-size "))
      << view->export_text().toStdString();
}

}  // namespace
