// The Plan tab through its real widgets, offscreen: a profile measured in the worker and kept in
// a real database, plans at the budget the slider or the field sets (the same plans the planner
// gives for those costs), a budget no plan fits, "Run this plan" through the form into measured
// runs drawn beside the predictions, and the chart's points saying what they are.
#include <qcustomplot.h>

#include <QComboBox>
#include <QDir>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSlider>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>
#include <nlohmann/json.hpp>

#include "common/byte_size.h"
#include "plan/chain_costs_json.h"
#include "plan/chain_profile.h"
#include "plan/frontier.h"
#include "plan/profile_key.h"
#include "plan/segment_planner.h"
#include "plan_strip.h"
#include "plan_view.h"
#include "store/run_writer.h"
#include "store/sqlite_db.h"
#include "window_bench.h"

namespace {

using rematlab::ChainCosts;
using rematlab::CheckpointPolicy;
using rematlab::RunStatus;
using rematlab::RunStore;
using rematlab::StageCost;
using rematlab::ui::PlanView;
using rematlab::ui::testing::Bench;
using rematlab::ui::testing::kTimeoutMs;
namespace plan = rematlab::plan;

// Clicks Profile and waits for it to end; the key of the profile, empty when it failed.
QString profile_the_form(Bench& bench) {
  QSignalSpy ended(&bench.window, &rematlab::ui::MainWindow::profileEnded);
  bench.window.plan_view()->profile_button()->click();
  if (!ended.wait(kTimeoutMs)) return {};
  return ended.takeFirst().at(0).toString();
}

ChainCosts kept_costs(Bench& bench, const QString& key) {
  const auto kept = bench.reader().chain_profile(key.toStdString());
  EXPECT_TRUE(kept.has_value());
  return plan::chain_costs_from_json(nlohmann::json::parse(kept ? kept->costs : "{}"));
}

int64_t field_budget(const PlanView* view) {
  return rematlab::parse_byte_size(view->budget_field()->text().toStdString(), "budget");
}

// The plan the tab shows is the planner's for the kept costs at the field's budget, and the strip
// draws exactly its recomputed sublayers.
void expect_the_planners_plan(const PlanView* view, const ChainCosts& costs) {
  const auto expected = plan::plan_under_budget(costs, field_budget(view));
  ASSERT_TRUE(expected.has_value());
  ASSERT_TRUE(view->current_plan().has_value());
  EXPECT_EQ(view->current_plan()->plan.canonical(), expected->plan.canonical());
  EXPECT_EQ(view->current_plan()->prediction.peak_bytes, expected->prediction.peak_bytes);
  std::vector<bool> recomputed(costs.stages.size(), false);
  for (const auto& segment : expected->plan.segments) {
    for (int64_t i = segment.begin; i < segment.end; ++i) recomputed[i] = segment.recompute;
  }
  EXPECT_EQ(view->strip()->recomputed(), recomputed);
  EXPECT_TRUE(view->plan_label()->text().contains(
      QString::fromStdString(expected->plan.canonical()).toHtmlEscaped()));
  EXPECT_TRUE(view->run_button()->isEnabled());
}

TEST(PlanTab, ProfilesTheFormsConfigurationKeepsItAndPlansWhereTheSliderAndFieldSay) {
  Bench bench;
  bench.panel->preset_field()->setCurrentText("tiny");
  bench.panel->findChild<QSpinBox*>("layers")->setValue(4);
  PlanView* view = bench.window.plan_view();
  EXPECT_FALSE(view->run_button()->isEnabled());  // nothing profiled yet
  EXPECT_EQ(view->configuration_field()->count(), 0);

  const QString key = profile_the_form(bench);
  ASSERT_FALSE(key.isEmpty()) << bench.window.status_text().toStdString();
  EXPECT_FALSE(bench.window.is_running());
  EXPECT_TRUE(view->profile_button()->isEnabled());
  // Kept in the database under the form's key, offered and selected.
  const auto form = bench.panel->first_config();
  ASSERT_TRUE(form.has_value());
  EXPECT_EQ(key.toStdString(), plan::profile_key(*form, plan::ProfileOptions{}.repeats));
  ASSERT_EQ(bench.reader().chain_profiles().size(), 1u);
  EXPECT_EQ(view->configuration_field()->count(), 1);
  EXPECT_EQ(view->profile_key(), key);
  EXPECT_TRUE(view->configuration_field()->currentText().contains("batch 8"));
  const ChainCosts costs = kept_costs(bench, key);
  ASSERT_EQ(costs.stages.size(), 8u);

  // The chart: a frontier sample at each ladder budget, every uniform policy, one chosen point.
  EXPECT_GT(view->frontier_graph()->dataCount(), 10);
  EXPECT_EQ(view->uniform_graph()->dataCount(), 8);  // none, 3 × sublayer:A,F, every:1 … every:4

  const int64_t smallest = plan::smallest_feasible_budget(costs);
  const int64_t none_peak = plan::none_peak_bytes(costs);
  for (const int position : {0, 300, 700, 1000}) {
    view->budget_slider()->setValue(position);
    const int64_t budget = field_budget(view);
    // The slider's ends are the smallest feasible budget and none's peak (the field rounds up
    // to a tenth of a MiB or a whole KiB).
    if (position == 0) {
      EXPECT_GE(budget, smallest);
    }
    if (position == 1000) {
      EXPECT_GE(budget, none_peak);
    }
    expect_the_planners_plan(view, costs);
  }
  EXPECT_EQ(view->current_plan()->plan.canonical(), "none");  // at none's peak
  // Drawn again (a run was recorded), the budget stays where the user left it, even above
  // none's peak, where the field's rounding up put it.
  const QString at_the_top = view->budget_field()->text();
  view->refresh();
  EXPECT_EQ(view->budget_field()->text(), at_the_top);
  view->budget_field()->setText("1GiB");
  view->refresh();
  EXPECT_EQ(view->budget_field()->text(), "1GiB");
  EXPECT_EQ(view->current_plan()->plan.canonical(), "none");

  // A budget typed in the field moves the slider there and plans at it.
  view->budget_slider()->setValue(0);
  const int64_t middle = (smallest + none_peak) / 2;
  view->budget_field()->setText(QString("%1KiB").arg(middle / 1024));
  EXPECT_NEAR(view->budget_slider()->value(), 500, 5);
  expect_the_planners_plan(view, costs);
}

TEST(PlanTab, ABudgetNoPlanFitsNamesTheSmallestThatDoesAndABadOneIsRefused) {
  Bench bench;
  const QString key = profile_the_form(bench);
  ASSERT_FALSE(key.isEmpty());
  PlanView* view = bench.window.plan_view();
  const int64_t smallest = plan::smallest_feasible_budget(kept_costs(bench, key));

  view->budget_field()->setText("1KiB");
  EXPECT_FALSE(view->current_plan().has_value());
  EXPECT_FALSE(view->run_button()->isEnabled());
  EXPECT_TRUE(view->plan_label()->text().contains("No plan fits"));
  EXPECT_TRUE(view->plan_label()->text().contains(
      QString::number(static_cast<double>(smallest) / 1048576.0, 'f', 1)))
      << view->plan_label()->text().toStdString();
  for (const bool recomputed : view->strip()->recomputed()) EXPECT_FALSE(recomputed);
  EXPECT_TRUE(view->strip()->describe_stage(0).contains("no plan fits"));

  view->budget_field()->setText("lots");
  EXPECT_FALSE(view->budget_bytes().has_value());
  EXPECT_FALSE(view->budget_problem().isEmpty());
  EXPECT_FALSE(view->run_button()->isEnabled());
  EXPECT_TRUE(view->plan_label()->text().contains("lots"));
}

TEST(PlanTab, RunThisPlanAddsItToTheSweepWhichTrainsItFromTheKeptProfile) {
  Bench bench;
  const QString key = profile_the_form(bench);
  ASSERT_FALSE(key.isEmpty());
  PlanView* view = bench.window.plan_view();
  view->budget_slider()->setValue(400);
  ASSERT_TRUE(view->current_plan().has_value());
  const std::string chosen = view->current_plan()->plan.canonical();
  const QString policy = view->policy_text();
  ASSERT_TRUE(policy.startsWith("plan:"));

  view->run_button()->click();
  EXPECT_EQ(bench.panel->policies_field()->text(), "none; " + policy);
  EXPECT_TRUE(bench.window.status_text().contains("plans from this profile"));
  view->run_button()->click();  // twice is still one run of it
  EXPECT_EQ(bench.panel->policies_field()->text(), "none; " + policy);
  QSignalSpy ended(&bench.window, &rematlab::ui::MainWindow::sweepEnded);
  bench.panel->run_button()->click();
  EXPECT_FALSE(view->profile_button()->isEnabled());  // not while the window trains
  ASSERT_TRUE(ended.wait(kTimeoutMs));
  EXPECT_EQ(ended.takeFirst().at(0).toString(), "ok");
  EXPECT_TRUE(view->profile_button()->isEnabled());

  // The plan run planned from the kept profile (not measured again) and chose the tab's plan.
  const auto runs = bench.reader().runs();
  ASSERT_EQ(runs.size(), 2u);
  const auto& planned = runs[0].request.plan ? runs[0] : runs[1];
  ASSERT_TRUE(planned.request.plan.has_value());
  EXPECT_EQ(planned.request.plan->chosen, chosen);
  EXPECT_NE(planned.request.plan->profile_source.find("runs database"), std::string::npos)
      << planned.request.plan->profile_source;
  EXPECT_EQ(bench.reader().chain_profiles().size(), 1u);

  // Both runs are drawn, measured, beside the predictions; the selection stayed.
  EXPECT_EQ(view->profile_key(), key);
  EXPECT_EQ(view->measured_plans_graph()->dataCount(), 1);
  EXPECT_EQ(view->measured_others_graph()->dataCount(), 1);
  const auto point = view->measured_plans_graph()->data()->constBegin();
  EXPECT_DOUBLE_EQ(point->key,
                   static_cast<double>(planned.result.peak_activation_bytes) / 1048576.0);
  EXPECT_DOUBLE_EQ(point->value, planned.result.tokens_per_s);

  // Runs of another configuration, or with an offload the costs do not model, are not drawn.
  bench.panel->policies_field()->setText("every:1");
  bench.panel->batch_field()->setText("4");
  EXPECT_EQ(bench.run_sweep(), "ok");
  bench.panel->batch_field()->setText("8");
  bench.panel->offload_field()->setText("disk");
  EXPECT_EQ(bench.run_sweep(), "ok");
  EXPECT_EQ(bench.reader().runs().size(), 4u);
  EXPECT_EQ(view->measured_plans_graph()->dataCount(), 1);
  EXPECT_EQ(view->measured_others_graph()->dataCount(), 1);
}

TEST(PlanTab, RunThisPlanOfAnotherConfigurationMakesTheFormTrainThatConfiguration) {
  Bench bench;
  bench.panel->batch_field()->setText("4");
  const QString key = profile_the_form(bench);
  ASSERT_FALSE(key.isEmpty());
  bench.panel->batch_field()->setText("2, 16");
  bench.panel->policies_field()->setText("none; every:1");
  bench.panel->steps_field()->setValue(9);
  PlanView* view = bench.window.plan_view();
  view->budget_slider()->setValue(500);
  view->run_button()->click();
  // The profiled batch, the plan alone; the training settings stay the user's.
  EXPECT_EQ(bench.panel->batch_field()->text(), "4");
  EXPECT_EQ(bench.panel->policies_field()->text(), view->policy_text());
  EXPECT_EQ(bench.panel->steps_field()->value(), 9);
  EXPECT_EQ(bench.panel->preset_field()->currentText(), "tiny");
  EXPECT_TRUE(bench.panel->can_start()) << bench.panel->problem().toStdString();
  EXPECT_TRUE(bench.window.status_text().contains("profiled model and batch"));
  EXPECT_TRUE(bench.window.status_text().contains("plans from this profile"));
}

TEST(PlanTab, KeptProfilesAreOfferedAndTheChartSaysWhatEachPointIs) {
  Bench bench;
  // A profile kept by an earlier session (the CLI's `plan --db`), here with made-up costs: two
  // blocks whose MLPs are the costly part.
  rematlab::RunConfig config;
  config.preset = "tiny";
  config.threads = 1;
  ChainCosts costs;
  costs.input_bytes = 1 << 20;
  for (int i = 0; i < 4; ++i) {
    const bool mlp = i % 2 == 1;
    StageCost stage;
    stage.forward_ms = mlp ? 8.0 : 2.0;
    stage.backward_ms = mlp ? 16.0 : 4.0;
    stage.early_stop_saving_ms = mlp ? 4.0 : 0.5;
    stage.kept_bytes = (mlp ? 6 : 3) << 20;
    stage.output_bytes = 1 << 20;
    stage.forward_transient_bytes = 1 << 20;
    stage.backward_transient_bytes = 2 << 20;
    costs.stages.push_back(stage);
  }
  costs.head_peak_bytes = 2 << 20;
  costs.fixed_ms = 10.0;
  {
    RunStore store(bench.db.toStdString());
    store.save_chain_profile(plan::profile_key(config, 5),
                             {plan::to_json(costs).dump(), 1234.0, "2026-11-30T10:00:00Z"});
  }
  bench.window.show();
  bench.window.resize(1280, 720);
  bench.window.tabs()->setCurrentWidget(bench.window.plan_view());
  bench.window.open_database(bench.db);  // reads the profile kept meanwhile
  PlanView* view = bench.window.plan_view();
  ASSERT_EQ(view->configuration_field()->count(), 1);
  EXPECT_TRUE(view->configuration_field()->currentText().startsWith("tiny (2×64"));
  EXPECT_TRUE(view->plan_label()->text().contains("2026-11-30T10:00:00Z"));
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&bench.window));
  view->chart()->replot();

  // Hovering `none`'s point names it with its prediction; empty space says nothing.
  const auto none = plan::predict_plan(costs, CheckpointPolicy::none().plan_for(2, 0.0));
  const double tokens = static_cast<double>(config.tokens_per_step()) / (none.step_ms / 1e3);
  const QPointF at(
      view->chart()->xAxis->coordToPixel(static_cast<double>(none.peak_bytes) / 1048576.0),
      view->chart()->yAxis->coordToPixel(tokens));
  EXPECT_TRUE(view->describe_point_at(at + QPointF(2, -2)).startsWith("none · predicted"))
      << view->describe_point_at(at).toStdString();
  const QPointF empty(at.x(), view->chart()->yAxis->coordToPixel(0));
  EXPECT_TRUE(view->describe_point_at(empty).isEmpty())
      << view->describe_point_at(empty).toStdString() << " at " << empty.x() << "," << empty.y()
      << " (none at " << at.x() << "," << at.y() << ")";
  // The strip says what each sublayer does under the plan.
  view->budget_slider()->setValue(0);
  ASSERT_TRUE(view->current_plan().has_value());
  EXPECT_TRUE(view->strip()->describe_stage(1).contains("recomputed"));

  // A profile measured on another host is offered, named so; its plan makes the form train
  // its configuration, and the run will measure this host's own profile first.
  {
    RunStore store(bench.db.toStdString());
    rematlab::RunConfig other = config;
    other.batch = 2;
    store.save_chain_profile(
        plan::profile_key(other, 5, "another-host", "2.0.0"),
        {plan::to_json(costs).dump(), 99.0, "2026-11-29T10:00:00Z"});  // older: listed second
  }
  view->refresh();
  ASSERT_EQ(view->configuration_field()->count(), 2);
  view->configuration_field()->setCurrentIndex(1);
  EXPECT_TRUE(view->configuration_field()->currentText().endsWith("on another-host"));
  view->run_button()->click();
  EXPECT_EQ(bench.panel->batch_field()->text(), "2");
  EXPECT_TRUE(bench.window.status_text().contains("profiles this host first"))
      << bench.window.status_text().toStdString();
  view->configuration_field()->setCurrentIndex(0);

  // The form's own configuration profiled with 3 repeats (rematlab-cli plan --repeats 3): its plan
  // joins the form's policies, and the run, which looks up the default 5 repeats, profiles first.
  const auto form = bench.panel->first_config();
  ASSERT_TRUE(form.has_value());
  {
    RunStore store(bench.db.toStdString());
    store.save_chain_profile(plan::profile_key(*form, 3),
                             {plan::to_json(costs).dump(), 5.0, "2026-11-28T10:00:00Z"});
  }
  bench.panel->policies_field()->setText("none");
  view->refresh();
  ASSERT_EQ(view->configuration_field()->count(), 3);
  view->configuration_field()->setCurrentIndex(2);
  view->run_button()->click();
  EXPECT_EQ(bench.panel->policies_field()->text(), "none; " + view->policy_text());
  EXPECT_TRUE(bench.window.status_text().contains("added"));
  EXPECT_TRUE(bench.window.status_text().contains("profiles this host first"));
  view->configuration_field()->setCurrentIndex(0);

  // A profile of a Qwen 2 shape (q, k and v biases): the form holds it whole.
  {
    RunStore store(bench.db.toStdString());
    rematlab::RunConfig qwen = config;
    qwen.model = rematlab::model_preset("llama-tiny");
    qwen.model.qkv_bias = true;
    store.save_chain_profile(plan::profile_key(qwen, 5),
                             {plan::to_json(costs).dump(), 7.0, "2026-11-27T10:00:00Z"});
  }
  view->refresh();
  ASSERT_EQ(view->configuration_field()->count(), 4);
  view->configuration_field()->setCurrentIndex(3);
  view->run_button()->click();
  EXPECT_TRUE(bench.panel->qkv_bias_field()->isChecked());
  EXPECT_FALSE(bench.window.status_text().contains("cannot hold"))
      << bench.window.status_text().toStdString();
  view->configuration_field()->setCurrentIndex(0);
  // One the form has no field for (a gradient clip): its plan is loaded as near as the form
  // can, and the status says what could not be.
  {
    RunStore store(bench.db.toStdString());
    rematlab::RunConfig clipped = config;
    clipped.grad_clip = 0.25;
    store.save_chain_profile(plan::profile_key(clipped, 5),
                             {plan::to_json(costs).dump(), 7.0, "2026-11-27T10:00:00Z"});
  }
  view->refresh();
  ASSERT_EQ(view->configuration_field()->count(), 5);
  // Profiles are listed in their keys' order, which puts the clipped one fourth.
  view->configuration_field()->setCurrentIndex(3);
  view->run_button()->click();
  EXPECT_TRUE(bench.window.status_text().contains("cannot hold the profiled model's grad_clip"))
      << bench.window.status_text().toStdString();
  view->configuration_field()->setCurrentIndex(0);

  // The chart exports with the others.
  const QStringList written = view->export_images(bench.dir.path(), "plan");
  ASSERT_EQ(written.size(), 2);
  EXPECT_GT(QFileInfo(written[0]).size(), 10000);
}

// Made-up costs of two blocks whose MLPs are the costly part, as a kept profile holds them.
ChainCosts two_block_costs() {
  ChainCosts costs;
  costs.input_bytes = 1 << 20;
  for (int i = 0; i < 4; ++i) {
    const bool mlp = i % 2 == 1;
    StageCost stage;
    stage.forward_ms = mlp ? 8.0 : 2.0;
    stage.backward_ms = mlp ? 16.0 : 4.0;
    stage.kept_bytes = (mlp ? 6 : 3) << 20;
    stage.output_bytes = 1 << 20;
    costs.stages.push_back(stage);
  }
  costs.head_peak_bytes = 2 << 20;
  costs.fixed_ms = 10.0;
  return costs;
}

// A recorded run with a setting this build cannot read is not drawn as a measurement of the
// profiled configuration (its key would be made from that setting's default), and a kept key
// with one is not offered: the tab says why, naming the setting.
TEST(PlanTab, RunsAndKeysWithSettingsThisVersionCannotReadAreNeitherDrawnNorOffered) {
  Bench bench;
  rematlab::RunConfig config;
  config.preset = "tiny";
  config.threads = 1;
  const std::string key = plan::profile_key(config, 5);
  const std::string costs = plan::to_json(two_block_costs()).dump();
  {
    RunStore store(bench.db.toStdString());
    store.save_chain_profile(key, {costs, 1.0, "2026-11-30T10:00:00Z"});
    nlohmann::json edited = nlohmann::json::parse(key);
    edited["config"]["future_setting"] = 1;
    store.save_chain_profile(edited.dump(), {costs, 1.0, "2026-11-29T10:00:00Z"});
  }
  std::vector<int64_t> ids;
  {
    rematlab::RunWriter writer(bench.db.toStdString());
    for (int i = 0; i < 2; ++i) {
      rematlab::RunConfig trained = config;
      trained.checkpoint = "every:1";
      const int64_t id = writer.begin_run(std::nullopt, "every:1", trained);
      rematlab::RunSummary summary;
      summary.config = trained;
      summary.steps_completed = 3;
      summary.tokens_per_s = 1000.0 * (i + 1);
      summary.step_ms = 10.0;
      summary.peak_activation_bytes = int64_t{3 + i} << 20;
      writer.finish_run(id, summary);
      ids.push_back(id);
    }
    writer.flush();
  }
  bench.window.show();
  bench.window.resize(1280, 720);
  bench.window.tabs()->setCurrentWidget(bench.window.plan_view());
  bench.window.open_database(bench.db);
  PlanView* view = bench.window.plan_view();
  ASSERT_EQ(view->configuration_field()->count(), 1);
  EXPECT_EQ(view->profile_key().toStdString(), key);
  const auto* range = view->findChild<QLabel*>("plan-range");
  ASSERT_NE(range, nullptr);
  EXPECT_TRUE(
      range->text().contains("a newer RematLab or a hand edit): future_setting could not "
                             "be read"))
      << range->text().toStdString();
  EXPECT_EQ(view->measured_others_graph()->dataCount(), 2);  // both runs, read in full

  rematlab::Database(bench.db.toStdString(), rematlab::Database::Mode::kReadWrite)
      .exec("UPDATE runs SET config = json_set(config, '$.future_setting', 1) WHERE id = " +
            std::to_string(ids[1]));
  view->refresh();
  ASSERT_EQ(view->measured_others_graph()->dataCount(), 1);
  EXPECT_DOUBLE_EQ(view->measured_others_graph()->data()->constBegin()->value, 1000.0);
}

TEST(PlanTab, StopEndsAProfileAndKeepsNothing) {
  Bench bench;
  bench.panel->preset_field()->setCurrentText("small");  // seconds per sublayer: time to stop
  bench.panel->findChild<QSpinBox*>("threads")->setValue(1);
  QSignalSpy ended(&bench.window, &rematlab::ui::MainWindow::profileEnded);
  bench.window.plan_view()->profile_button()->click();
  EXPECT_TRUE(bench.window.is_running());
  EXPECT_FALSE(bench.window.plan_view()->profile_button()->isEnabled());
  EXPECT_FALSE(bench.panel->run_button()->isEnabled());
  QTRY_VERIFY_WITH_TIMEOUT(bench.window.status_text().contains("sublayer 1 of"), kTimeoutMs);
  bench.panel->stop_button()->click();
  ASSERT_TRUE(ended.wait(kTimeoutMs));
  EXPECT_TRUE(ended.takeFirst().at(0).toString().isEmpty());
  EXPECT_EQ(bench.window.status_text(), "Profiling stopped");
  EXPECT_FALSE(bench.window.is_running());
  EXPECT_TRUE(bench.window.plan_view()->profile_button()->isEnabled());
  EXPECT_TRUE(bench.reader().chain_profiles().empty());
}

TEST(PlanTab, ClosingTheWindowWhileItProfilesStopsTheProfileAndKeepsNothing) {
  QString db;
  QTemporaryDir dir;
  {
    Bench bench;
    db = dir.filePath("kept.sqlite");
    ASSERT_TRUE(bench.window.open_database(db));
    bench.panel->preset_field()->setCurrentText("small");
    bench.panel->findChild<QSpinBox*>("threads")->setValue(1);
    bench.window.plan_view()->profile_button()->click();
    QTRY_VERIFY_WITH_TIMEOUT(bench.window.status_text().contains("sublayer 1 of"), kTimeoutMs);
  }  // the window goes: it stops the worker and waits for it
  RunStore store(db.toStdString(), rematlab::StoreAccess::kReadOnly, false);
  EXPECT_TRUE(store.chain_profiles().empty());
}

}  // namespace
