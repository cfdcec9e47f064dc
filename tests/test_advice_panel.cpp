// The Advisor panel (issue 25): its next steps in the form's words, a `none` run found for runs
// that differ only in what does not change a step's cost (and what differs said), a deleted run
// no longer advised, a replay that says what it found (also nothing), findings counted in
// words.
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTreeWidget>

#include "advice_panel.h"
#include "advice_words.h"
#include "common/wording.h"
#include "runs_view.h"
#include "window_bench.h"

namespace {

using rematlab::ui::AdvicePanel;
using rematlab::ui::in_form_words;
using rematlab::ui::testing::advise;
using rematlab::ui::testing::Bench;
using rematlab::ui::testing::kTimeoutMs;

TEST(AdviceWords, NextStepsAreSaidAsTheFormAndTheTabsNameThem) {
  using rematlab::command;
  using rematlab::runs_settings;
  using rematlab::setting;
  using rematlab::Wording;
  // Each next step as core words it, said first as the command line says it, then as the window.
  const auto said = [](const Wording& words, const std::string& command_line) {
    EXPECT_EQ(words.command_line(), command_line);
    return in_form_words(words);
  };
  EXPECT_EQ(said(setting("checkpoint", "every:1") + " (selective pays only with " +
                     setting("attention", "math") + ", whose s×s scores it recomputes)",
                 "--checkpoint every:1 (selective pays only with --attention math, whose s×s "
                 "scores it recomputes)"),
            "Policies every:1 (selective pays only with Attention math, whose s×s scores it "
            "recomputes)");
  EXPECT_EQ(said(setting("precision", "bf16") + " halves the weights and gradients; " +
                     setting("nproc", "2") + " " + setting("shard", "optimizer") +
                     " splits the optimizer's moments between processes",
                 "--precision bf16 halves the weights and gradients; --nproc 2 --shard "
                 "optimizer splits the optimizer's moments between processes"),
            "Precision bf16 halves the weights and gradients; Ranks 2, Shard optimizer splits "
            "the optimizer's moments between processes");
  EXPECT_EQ(said(setting("checkpoint", "plan:13MiB") +
                     " trains the fastest segment list that fits the activation memory this run "
                     "used (" +
                     command("plan", setting("budget", "13MiB")) + " " + runs_settings() +
                     " shows it first)",
                 "--checkpoint plan:13MiB trains the fastest segment list that fits the "
                 "activation memory this run used (`rematlab-cli plan --budget 13MiB` with the "
                 "run's settings shows it first)"),
            "Policies plan:13MiB trains the fastest segment list that fits the activation memory "
            "this run used (the Plan tab for the run's configuration shows it first)");
  // A setting the form does not have stays the command line's, said so.
  EXPECT_EQ(said("train again with a lower learning rate (" + setting("lr", "0.0001") + " " +
                     setting("grad_clip", "1") + ")",
                 "train again with a lower learning rate (--lr 0.0001 --grad-clip 1)"),
            "train again with a lower learning rate (Learning rate 0.0001, the command line's "
            "--grad-clip 1)");
  // A command the window has no place for is kept whole, its flags untouched.
  EXPECT_EQ(
      said(command("check", setting("checkpoint", "every:1") + " " + setting("at_step", "7")) +
               " " + runs_settings("flags") + " shows the difference; train with " +
               setting("checkpoint", "none") + " until it is fixed",
           "`rematlab-cli check --checkpoint every:1 --at-step 7` with the run's flags "
           "shows the difference; train with --checkpoint none until it is fixed"),
      "the command line's `rematlab-cli check --checkpoint every:1 --at-step 7` for the "
      "run's configuration shows the difference; train with Policies none until it is "
      "fixed");
  EXPECT_EQ(said(setting("budget", "2MiB") + " (the smallest that fits batch 8), or " +
                     setting("batch", "3"),
                 "--budget 2MiB (the smallest that fits batch 8), or --batch 3"),
            "Budget 2MiB (the smallest that fits batch 8), or Micro-batch 3");
  // Plain words are said as they are, flags in them included: only parts name settings.
  EXPECT_EQ(in_form_words(Wording("use --batch 3")), "use --batch 3");
}

QString next_steps(const AdvicePanel* advice) {
  QStringList steps;
  const QTreeWidget* tree = advice->findings_tree();
  for (int i = 0; i < tree->topLevelItemCount(); ++i) {
    const QTreeWidgetItem* finding = tree->topLevelItem(i);
    steps << finding->child(finding->childCount() - 1)->text(1);
  }
  return steps.join("\n");
}

TEST(AdvicePanel, FindsTheNoneRunThatDiffersOnlyInLearningRateAndStepsAndSaysSo) {
  Bench bench;
  const auto lr = bench.panel->findChildren<QDoubleSpinBox*>();
  QDoubleSpinBox* learning_rate = nullptr;
  for (QDoubleSpinBox* box : lr) {
    if (box->decimals() == 6) learning_rate = box;  // the learning rate's six decimals
  }
  ASSERT_NE(learning_rate, nullptr);
  learning_rate->setValue(0.003);
  bench.panel->steps_field()->setValue(5);
  ASSERT_EQ(bench.run_sweep(), "ok");  // none, lr 0.003, 5 steps
  learning_rate->setValue(0.001);
  bench.panel->steps_field()->setValue(4);
  bench.panel->policies_field()->setText("selective");
  ASSERT_EQ(bench.run_sweep(), "ok");  // selective, lr 0.001, 4 steps
  const std::vector<int64_t> ids = bench.window.runs_view()->shown_ids();
  ASSERT_EQ(ids.size(), 2u);
  AdvicePanel* advice = advise(bench, ids[1]);
  const QString notes = advice->notes_text();
  EXPECT_TRUE(notes.contains(QString("compared with run #%1 (none)").arg(ids[0])))
      << notes.toStdString();
  EXPECT_TRUE(notes.contains("lr 0.003")) << notes.toStdString();
  EXPECT_TRUE(notes.contains("steps 5")) << notes.toStdString();
  EXPECT_FALSE(notes.contains("no `none` run")) << notes.toStdString();
  // Selective under fused attention: memory not reduced against the measured none run, and the
  // next step in the form's words.
  ASSERT_TRUE(advice->finding_kinds().contains("memory_not_reduced"))
      << advice->finding_kinds().join(",").toStdString();
  const QString steps = next_steps(advice);
  EXPECT_TRUE(steps.contains("Policies every:1")) << steps.toStdString();
  EXPECT_FALSE(steps.contains("--")) << steps.toStdString();
  // Counted in words: "1 finding", "2 findings", never "finding(s)".
  const QString status = advice->status_text();
  EXPECT_FALSE(status.contains("(s)")) << status.toStdString();
  EXPECT_TRUE(status.endsWith(advice->finding_kinds().size() == 1
                                  ? QString(": 1 finding.")
                                  : QString(": %1 findings.").arg(advice->finding_kinds().size())))
      << status.toStdString();
}

TEST(AdvicePanel, AReplaySaysWhatItFoundAndADeletedRunIsNoLongerAdvised) {
  Bench bench;
  bench.panel->steps_field()->setValue(3);
  ASSERT_EQ(bench.run_sweep(), "ok");
  const int64_t id = bench.window.runs_view()->shown_ids().front();
  AdvicePanel* advice = advise(bench, id);
  EXPECT_EQ(advice->status_text(), QString("Run #%1: no findings.").arg(id));
  EXPECT_TRUE(advice->notes_text().contains("missing gradients: looked for only by a replay"));
  // The replay: it says it ran, what it checked, and that nothing is new.
  QSignalSpy shown(advice, &AdvicePanel::diagnosisShown);
  advice->diagnose_with_replays();
  ASSERT_TRUE(shown.wait(kTimeoutMs));
  EXPECT_EQ(advice->status_text(), QString("Run #%1 replayed: nothing new; no findings.").arg(id));
  EXPECT_TRUE(
      advice->notes_text().contains("✓ missing gradients: step 0 (the first) replayed, "
                                    "all "))
      << advice->notes_text().toStdString();
  // Deleted: the panel lets it go, and a replay has nothing to replay.
  ASSERT_TRUE(bench.window.runs_view()->delete_runs({id}, /*confirmed=*/true));
  EXPECT_EQ(advice->run_id(), 0);
  EXPECT_TRUE(advice->status_text().startsWith("Select one run"));
  EXPECT_TRUE(advice->findings_tree()->topLevelItemCount() == 0);
  auto* replay = advice->findChild<QPushButton*>();
  ASSERT_NE(replay, nullptr);
  EXPECT_FALSE(replay->isEnabled());
}

}  // namespace
