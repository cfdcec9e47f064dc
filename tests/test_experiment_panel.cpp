// The experiment form through its real widgets, offscreen: a bad value is said at its field in
// the form's words and nothing moves, ranks and shard are checked, specs load field by field,
// the wheel scrolls the form rather than change a field, and the form is as the user left it
// after a restart.
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTest>
#include <QTextBlock>
#include <QTextCursor>
#include <QWheelEvent>

#include "advice_words.h"
#include "common/errors.h"
#include "experiment_panel.h"
#include "field_errors.h"
#include "main_window.h"
#include "model/hf_config.h"
#include "sweep/default_study.h"
#include "sweep/sweep_spec.h"
#include "window_bench.h"

namespace {

using rematlab::ui::ExperimentPanel;
using rematlab::ui::MainWindow;
using rematlab::ui::testing::Bench;
using rematlab::ui::testing::rect_in;
using rematlab::ui::testing::show_at;

TEST(ExperimentPanel, InvalidPolicyDisablesRunWithTheReasonAtTheField) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  panel->policies_field()->setText("none; every:0");
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().contains("every:0")) << panel->problem().toStdString();
  EXPECT_TRUE(panel->run_button()->toolTip().contains("every:0"));
  EXPECT_TRUE(panel->policies_field()->property("invalid").toBool());  // marked at the field
  EXPECT_TRUE(panel->policies_field()->toolTip().startsWith(panel->problem()));
  panel->policies_field()->setText("none; sublayer:1,2");
  EXPECT_TRUE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().isEmpty());
  EXPECT_FALSE(panel->policies_field()->property("invalid").toBool());
  EXPECT_FALSE(panel->policies_field()->toolTip().contains("every:0"));
}

// Open config.json…: a shipped configuration fills the model fields, Qwen's biases, q/k norms,
// head width and rotary base included, and the first run is its model; a file that is no
// configuration, or a shape beyond the form's ranges, changes nothing and says why.
TEST(ExperimentPanel, AHuggingFaceConfigFillsTheModelFieldsWhole) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  QTemporaryDir dir;
  const auto write = [&](const QString& name, const char* text) {
    QFile file(dir.filePath(name));
    EXPECT_TRUE(file.open(QIODevice::WriteOnly));
    file.write(text);
    return dir.filePath(name);
  };
  // A small Qwen 2 shape, with q/k/v biases and a rotary base of 1e6.
  const QString qwen = write("config.json", R"({"model_type": "qwen2", "hidden_size": 128,
      "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
      "intermediate_size": 384, "vocab_size": 512, "max_position_embeddings": 256,
      "rope_theta": 1000000.0, "tie_word_embeddings": false})");
  ASSERT_TRUE(panel->load_model_config(qwen));
  const auto config = panel->first_config();
  ASSERT_TRUE(config) << panel->problem().toStdString();
  const rematlab::ModelConfig expected = rematlab::import_hf_config(qwen.toStdString()).model;
  // The form holds the whole shape: Qwen 2's biases and rotary base included.
  EXPECT_TRUE(config->model.qkv_bias);
  EXPECT_EQ(config->model.rope_theta, 1e6);
  EXPECT_TRUE(panel->qkv_bias_field()->isChecked());
  EXPECT_EQ(config->model.parameter_count(), expected.parameter_count());
  EXPECT_EQ(config->model.key_value_heads(), 2);
  EXPECT_EQ(config->model.seq_len, 256);
  EXPECT_FALSE(config->model.tie_head);
  const QString said = panel->model_source_label()->text();
  EXPECT_TRUE(said.startsWith("config.json (qwen2)")) << said.toStdString();
  // A Qwen 3 shape with heads wider than d_model / heads: its q/k norms and head width too.
  const QString qwen3 = write("qwen3.json", R"({"model_type": "qwen3", "hidden_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
      "intermediate_size": 96, "vocab_size": 128, "max_position_embeddings": 32})");
  ASSERT_TRUE(panel->load_model_config(qwen3));
  ASSERT_TRUE(panel->first_config()) << panel->problem().toStdString();
  EXPECT_TRUE(panel->first_config()->model.qk_norm);
  EXPECT_FALSE(panel->first_config()->model.qkv_bias);
  EXPECT_EQ(panel->first_config()->model.head_dim(), 32);
  EXPECT_EQ(panel->first_config()->model.parameter_count(),
            rematlab::import_hf_config(qwen3.toStdString()).model.parameter_count());
  // The spec the form sends keeps them, and a form loaded from it holds them again.
  const auto spec = panel->spec();
  ASSERT_TRUE(spec);
  panel->load_spec(rematlab::default_study_spec());
  EXPECT_FALSE(panel->qk_norm_field()->isChecked());
  panel->load_spec(*spec);
  EXPECT_TRUE(panel->qk_norm_field()->isChecked());
  EXPECT_EQ(panel->head_width_field()->value(), 32);
  // A spec (or a profile's record) that does not name them means the model has none, whatever
  // the form held: its preset here names no preset, so nothing else resets the fields.
  nlohmann::ordered_json plain = *spec;
  for (const char* key : {"qk_norm", "qkv_bias", "head_dim", "rope_theta"})
    plain["base"].erase(key);
  plain["base"]["preset"] = "llama from elsewhere";
  panel->load_spec(plain);
  EXPECT_FALSE(panel->qk_norm_field()->isChecked());
  EXPECT_EQ(panel->head_width_field()->value(), 0);
  EXPECT_EQ(panel->rope_theta_field()->value(), rematlab::ModelConfig{}.rope_theta);
  // GPT has none of Llama's: the fields are disabled, and the spec does not carry them.
  panel->arch_field()->setCurrentText("gpt");
  EXPECT_FALSE(panel->qk_norm_field()->isEnabled());
  EXPECT_FALSE(panel->rope_theta_field()->isEnabled());
  ASSERT_TRUE(panel->first_config()) << panel->problem().toStdString();
  EXPECT_FALSE(panel->first_config()->model.qk_norm);
  // A shipped configuration (GPT-2, which this host holds whole).
  const QString configs = QString(REMATLAB_EXAMPLES_DIR) + "/configs/";
  ASSERT_TRUE(panel->load_model_config(configs + "gpt2.json"));
  ASSERT_TRUE(panel->first_config()) << panel->problem().toStdString();
  EXPECT_EQ(panel->first_config()->model.family, rematlab::ModelFamily::kGpt);
  EXPECT_EQ(panel->first_config()->model.vocab, 50257);
  // Not a configuration: one line naming the file, the fields as they were.
  EXPECT_FALSE(panel->load_model_config(write("notes.json", R"({"model_type": "bert"})")));
  EXPECT_TRUE(panel->model_source_label()->text().startsWith("notes.json was not read"))
      << panel->model_source_label()->text().toStdString();
  EXPECT_EQ(panel->first_config()->model.vocab, 50257);
  // A rotary base beyond the field's range: refused too.
  EXPECT_FALSE(panel->load_model_config(write("theta.json", R"({"model_type": "llama",
      "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 256, "rope_theta": 1e12})")));
  EXPECT_TRUE(panel->model_source_label()->text().contains("rotary base 1e+12"))
      << panel->model_source_label()->text().toStdString();
  // Deeper than the form's Layers field goes: refused, not clamped into a shallower model.
  EXPECT_FALSE(panel->load_model_config(write("deep.json", R"({"model_type": "llama",
      "hidden_size": 64, "num_hidden_layers": 1000, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 256})")));
  EXPECT_TRUE(panel->model_source_label()->text().contains(
      QString("deep.json was not loaded: 1000 layers, more than the form's %1")
          .arg(panel->layers_field()->maximum())))
      << panel->model_source_label()->text().toStdString();
  EXPECT_EQ(panel->first_config()->model.family, rematlab::ModelFamily::kGpt);
  EXPECT_EQ(panel->first_config()->model.vocab, 50257);
  // A mixture of experts: the form has no expert fields, so it is refused rather than trained
  // dense, the fields as they were.
  EXPECT_FALSE(panel->load_model_config(configs + "mixtral-8x7b.json"));
  EXPECT_TRUE(panel->model_source_label()->text().contains("its 8 experts are more than the form"))
      << panel->model_source_label()->text().toStdString();
  EXPECT_EQ(panel->first_config()->model.vocab, 50257);
  EXPECT_FALSE(panel->first_config()->model.moe.enabled());
  // A loaded spec's model is its own: the note goes.
  panel->load_spec(rematlab::default_study_spec());
  EXPECT_TRUE(panel->model_source_label()->text().isEmpty());
}

// Mistral's window: the preset and a config.json fill the field, 0 turns it off (and the spec
// says so, the preset having one), another value reaches the run and survives the spec.
TEST(ExperimentPanel, ASlidingWindowIsAFieldThePresetAndAConfigFillAndTheSpecKeeps) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  panel->preset_field()->setCurrentText("mistral-7b");
  EXPECT_EQ(panel->sliding_window_field()->value(), 4096);
  // 7B does not train here: the preset's shape made small, its window kept.
  panel->layers_field()->setValue(1);
  panel->d_model_field()->setValue(64);
  panel->heads_field()->setValue(4);
  panel->kv_heads_field()->setValue(2);
  panel->mlp_hidden_field()->setValue(128);
  panel->vocab_field()->setValue(256);
  panel->seq_len_field()->setValue(64);
  panel->sliding_window_field()->setValue(24);
  ASSERT_TRUE(panel->first_config()) << panel->problem().toStdString();
  EXPECT_EQ(panel->first_config()->model.sliding_window, 24);
  panel->sliding_window_field()->setValue(0);
  ASSERT_TRUE(panel->spec()) << panel->problem().toStdString();
  EXPECT_EQ((*panel->spec())["base"]["sliding_window"], 0);
  EXPECT_EQ(panel->first_config()->model.sliding_window, 0);
  // (A preset chosen now would ask before replacing the edited fields: a spec is loaded.)
  panel->load_spec(rematlab::default_study_spec());
  EXPECT_EQ(panel->sliding_window_field()->value(), 0);
  ASSERT_TRUE(panel->spec()) << panel->problem().toStdString();
  EXPECT_FALSE((*panel->spec())["base"].contains("sliding_window"));  // none, as the preset
  panel->sliding_window_field()->setValue(16);
  ASSERT_TRUE(panel->first_config()) << panel->problem().toStdString();
  EXPECT_EQ(panel->first_config()->model.sliding_window, 16);
  const auto spec = panel->spec();
  panel->load_spec(rematlab::default_study_spec());
  EXPECT_EQ(panel->sliding_window_field()->value(), 0);
  panel->load_spec(*spec);
  EXPECT_EQ(panel->sliding_window_field()->value(), 16);
  const QString configs = QString(REMATLAB_EXAMPLES_DIR) + "/configs/";
  ASSERT_TRUE(panel->load_model_config(configs + "mistral-7b.json"));
  EXPECT_EQ(panel->sliding_window_field()->value(), 4096);
  // Wider than the field: refused, not clamped into a narrower window.
  QTemporaryDir dir;
  QFile wide(dir.filePath("wide.json"));
  ASSERT_TRUE(wide.open(QIODevice::WriteOnly));
  wide.write(R"({"model_type": "mistral", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 128,
      "sliding_window": 100000})");
  wide.close();
  EXPECT_FALSE(panel->load_model_config(wide.fileName()));
  EXPECT_TRUE(panel->model_source_label()->text().contains("100000 tokens of window"))
      << panel->model_source_label()->text().toStdString();
  EXPECT_EQ(panel->sliding_window_field()->value(), 4096);
}

TEST(ExperimentPanel, BadBatchListAndMissingBudgetAreNamed) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  panel->batch_field()->setText("8, lots");
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().contains("lots"));
  EXPECT_TRUE(panel->batch_field()->property("invalid").toBool());
  panel->batch_field()->setText("8, 16");
  EXPECT_TRUE(panel->run_button()->isEnabled());
  panel->max_batch_box()->setChecked(true);
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().contains("budget"));
  panel->budget_field()->setText("64MiB");
  EXPECT_TRUE(panel->run_button()->isEnabled());
}

// A spec with fields of the wrong type (hand-edited, or from an older version) takes every
// field it can and keeps the others as they were: never half a form, never an exception.
TEST(ExperimentPanel, ASpecWithFieldsOfTheWrongTypeIsTakenFieldByField) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  const QString preset_before = panel->preset_field()->currentText();
  const auto spec = nlohmann::ordered_json::parse(R"({
      "name": 7,
      "base": {"preset": 5, "dropout": "much", "lr": "fast", "accum": 3, "steps": 4},
      "max_batch": {"budget": "64MiB", "limit": "large"},
      "data_parallel": {"ranks": "two", "shard": 1, "pp_split": [3, 1]}})");
  panel->pipeline_split_field()->setText("2,2");
  EXPECT_NO_THROW(panel->load_spec(spec));
  EXPECT_EQ(panel->pipeline_split(), "");  // not text: the rule's, as a spec without one
  EXPECT_EQ(panel->preset_field()->currentText(), preset_before);
  EXPECT_EQ(panel->findChild<QSpinBox*>("accum")->value(), 3);  // the fields that were right
  EXPECT_EQ(panel->steps_field()->value(), 4);
  EXPECT_TRUE(panel->max_batch_box()->isChecked());
  EXPECT_EQ(panel->budget_field()->text(), "64MiB");
  EXPECT_NO_THROW(panel->load_spec(nlohmann::ordered_json::array({1, 2})));
  EXPECT_NO_THROW(panel->load_spec(nlohmann::ordered_json::parse(R"({"max_batch": 3})")));
  EXPECT_FALSE(panel->max_batch_box()->isChecked());
}

// The ranks' fields are remembered with the form, the stage split among them.
TEST(ExperimentPanel, TheStageSplitIsRememberedWithThePipeline) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  panel->ranks_field()->setValue(2);
  panel->pipeline_stages_field()->setValue(2);
  panel->pipeline_split_field()->setText(" 3,1 ");
  const nlohmann::ordered_json values = panel->form_values();
  EXPECT_EQ(values["data_parallel"]["pp_split"], "3,1");
  panel->pipeline_split_field()->clear();
  panel->pipeline_stages_field()->setValue(1);
  panel->load_spec(values);
  EXPECT_EQ(panel->pipeline_stages(), 2);
  EXPECT_EQ(panel->pipeline_split(), "3,1");
  // Back to one process, the split left in its field is refused there, not dropped.
  panel->pipeline_stages_field()->setValue(1);
  panel->ranks_field()->setValue(1);
  EXPECT_TRUE(panel->problem().startsWith(
      "Stage split: splits the blocks between pipeline stages: give Pipeline stages 2"))
      << panel->problem().toStdString();
  EXPECT_TRUE(panel->pipeline_split_field()->property("invalid").toBool());
  // With two policies too: the split is what is wrong, not the runs for ranks there are none of.
  panel->policies_field()->setText("none; every:1");
  EXPECT_TRUE(panel->problem().startsWith(
      "Stage split: splits the blocks between pipeline stages: give Pipeline stages 2"))
      << panel->problem().toStdString();
  EXPECT_FALSE(panel->ranks_field()->property("invalid").toBool());
}

// Integers beyond a field's range (hand-edited) are held to it, never wrapped to another value:
// 2^32 + 2 tensor ranks are the most the field takes, not 2.
TEST(ExperimentPanel, IntegersBeyondAFieldsRangeAreHeldToItNotWrapped) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  const auto spec = nlohmann::ordered_json::parse(R"({
      "base": {"steps": 4294967298, "layers": -4294967295},
      "max_batch": {"budget": "64MiB", "limit": 18446744073709551615},
      "data_parallel": {"ranks": 4294967300, "tp": 4294967298, "sequence_parallel": true}})");
  EXPECT_NO_THROW(panel->load_spec(spec));
  EXPECT_EQ(panel->steps_field()->value(), panel->steps_field()->maximum());
  EXPECT_EQ(panel->findChild<QSpinBox*>("layers")->value(),
            panel->findChild<QSpinBox*>("layers")->minimum());
  EXPECT_EQ(panel->tensor_ranks(), 4096);
  EXPECT_EQ(panel->ranks(), 4096);
  EXPECT_TRUE(panel->sequence_parallel());
  EXPECT_EQ(panel->findChild<QSpinBox*>("max_batch_limit")->value(),
            panel->findChild<QSpinBox*>("max_batch_limit")->maximum());
}

TEST(ExperimentPanel, LoadsTheDefaultStudyAsTheSameSweep) {
  Bench bench;
  bench.panel->load_spec(rematlab::default_study_spec());
  ASSERT_TRUE(bench.panel->problem().isEmpty()) << bench.panel->problem().toStdString();
  const auto from_form = rematlab::expand_sweep(rematlab::parse_sweep_spec(*bench.panel->spec()));
  const auto expected =
      rematlab::expand_sweep(rematlab::parse_sweep_spec(rematlab::default_study_spec()));
  ASSERT_EQ(from_form.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(rematlab::describe_run(from_form[i].config),
              rematlab::describe_run(expected[i].config));
    EXPECT_EQ(from_form[i].config.preset, "small");
    EXPECT_EQ(from_form[i].config.steps, expected[i].config.steps);
    EXPECT_EQ(from_form[i].config.budget_bytes, expected[i].config.budget_bytes);
    EXPECT_TRUE(from_form[i].request.max_batch.has_value());
  }
}

TEST(ExperimentPanel, RanksAndShardAreValidatedAtTheirFields) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  panel->ranks_field()->setValue(2);
  panel->shard_field()->setCurrentText("optimizer");
  ASSERT_TRUE(panel->run_button()->isEnabled()) << panel->problem().toStdString();
  EXPECT_TRUE(panel->summary().startsWith("1 run on 2 ranks, optimizer sharded"))
      << panel->summary().toStdString();
  // Several runs: ranks train one.
  panel->policies_field()->setText("none; every:1");
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().startsWith("Ranks: ranks train one run together"))
      << panel->problem().toStdString();
  EXPECT_TRUE(panel->ranks_field()->property("invalid").toBool());
  EXPECT_FALSE(panel->policies_field()->property("invalid").toBool());
  panel->ranks_field()->setValue(1);
  panel->shard_field()->setCurrentText("none");
  EXPECT_TRUE(panel->run_button()->isEnabled()) << "one process sweeps as before";
  // More ranks than this host allows.
  panel->policies_field()->setText("every:1");
  panel->ranks_field()->setValue(4096);
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().contains("more than the limit")) << panel->problem().toStdString();
  EXPECT_TRUE(panel->ranks_field()->property("invalid").toBool());
  panel->ranks_field()->setValue(2);
  EXPECT_TRUE(panel->run_button()->isEnabled()) << panel->problem().toStdString();
  EXPECT_FALSE(panel->ranks_field()->property("invalid").toBool());
}

TEST(ExperimentPanel, LoraFineTuningTrainsItsAdaptersAndSaysHowManyParametersTrain) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  panel->preset_field()->setCurrentText("llama-tiny");
  EXPECT_TRUE(panel->parameters_label()->text().contains("all trained"))
      << panel->parameters_label()->text().toStdString();
  EXPECT_FALSE(panel->lora_rank_field()->isEnabled());  // full training: no rank to give
  panel->finetune_field()->setCurrentIndex(panel->finetune_field()->findData("lora"));
  panel->lora_rank_field()->setValue(4);
  panel->lora_targets_field()->setText("q,v,down");
  EXPECT_TRUE(panel->lora_rank_field()->isEnabled());
  ASSERT_TRUE(panel->run_button()->isEnabled()) << panel->problem().toStdString();
  const QString said = panel->parameters_label()->text();
  EXPECT_TRUE(said.contains("trained (")) << said.toStdString();
  // The form's values go to the run and come back when loaded.
  const nlohmann::ordered_json values = panel->form_values();
  EXPECT_EQ(values["base"]["finetune"], "lora");
  EXPECT_EQ(values["base"]["lora_rank"], 4);
  EXPECT_EQ(values["base"]["lora_targets"], "q,v,down");
  panel->finetune_field()->setCurrentIndex(panel->finetune_field()->findData("full"));
  EXPECT_FALSE(panel->form_values()["base"].contains("finetune"));
  panel->load_spec(values);
  EXPECT_EQ(panel->finetune_field()->currentData().toString(), "lora");
  EXPECT_EQ(panel->lora_rank_field()->value(), 4);
  EXPECT_EQ(panel->lora_targets_field()->text(), "q,v,down");
  // A projection the model lacks is said at its field, in the form's words.
  panel->lora_targets_field()->setText("q,x");
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->lora_targets_field()->property("invalid").toBool());
  EXPECT_TRUE(panel->problem().contains("LoRA targets")) << panel->problem().toStdString();
  EXPECT_TRUE(panel->parameters_label()->text().isEmpty());
  panel->lora_targets_field()->setText("all");
  ASSERT_TRUE(panel->run_button()->isEnabled()) << panel->problem().toStdString();
  // A bf16 base needs bf16 matmuls: said at the Base field until Precision is bf16.
  panel->base_precision_field()->setCurrentText("bf16");
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->base_precision_field()->property("invalid").toBool());
  EXPECT_TRUE(panel->problem().contains("Precision")) << panel->problem().toStdString();
  panel->findChild<QLineEdit*>("precision")->setText("bf16");
  ASSERT_TRUE(panel->run_button()->isEnabled()) << panel->problem().toStdString();
  // A quantised base needs no particular precision, and comes back when loaded.
  panel->base_precision_field()->setCurrentText("nf4");
  panel->findChild<QLineEdit*>("precision")->setText("fp32");
  ASSERT_TRUE(panel->run_button()->isEnabled()) << panel->problem().toStdString();
  const nlohmann::ordered_json quantised = panel->form_values();
  EXPECT_EQ(quantised["base"]["base_precision"], "nf4");
  panel->base_precision_field()->setCurrentText("fp32");
  panel->load_spec(quantised);
  EXPECT_EQ(panel->base_precision_field()->currentText(), "nf4");
  // A real run: its record has the adapters and the base as stored.
  ASSERT_EQ(bench.run_sweep(), "ok");
  const std::vector<rematlab::RunRecord> runs = bench.reader().runs();
  ASSERT_EQ(runs.size(), 1u);
  const rematlab::RunRecord& run = runs.front();
  EXPECT_EQ(run.config.model.lora.rank, 4);
  EXPECT_EQ(run.config.model.lora.targets, rematlab::kEveryLoraTarget);
  EXPECT_EQ(run.config.model.lora.base, rematlab::BasePrecision::kNf4);
}

TEST(Window, RanksShardAndBucketsAreAsTheUserLeftThemAfterARestart) {
  QTemporaryDir dir;
  {
    MainWindow first(dir.filePath("runs.sqlite"));
    first.experiment_panel()->ranks_field()->setValue(3);
    first.experiment_panel()->shard_field()->setCurrentText("gradients");
    first.experiment_panel()->bucket_size_field()->setText(" 4MiB ");
    first.remember_form();
  }
  MainWindow second(dir.filePath("runs.sqlite"));
  EXPECT_EQ(second.experiment_panel()->ranks_field()->value(), 3);
  EXPECT_EQ(second.experiment_panel()->shard_field()->currentText(), "gradients");
  EXPECT_EQ(second.experiment_panel()->bucket_size(), "4MiB");
  // A sweep spec (the default study) trains each point in one process, in the engine's buckets.
  second.experiment_panel()->load_spec(rematlab::default_study_spec());
  EXPECT_EQ(second.experiment_panel()->ranks_field()->value(), 1);
  EXPECT_EQ(second.experiment_panel()->shard_field()->currentText(), "none");
  EXPECT_EQ(second.experiment_panel()->bucket_size(), "");
}

// A QWheelEvent as the pointer would send it over `widget`.
void turn_wheel(QWidget* widget, int notches) {
  const QPointF at(widget->width() / 2.0, widget->height() / 2.0);
  QWheelEvent wheel(at, widget->mapToGlobal(at), QPoint(), QPoint(0, -120 * notches), Qt::NoButton,
                    Qt::NoModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(widget, &wheel);
}

TEST(Window, TheWheelOverAnUnfocusedFieldScrollsThePanel) {
  Bench bench;
  show_at(bench.window, 1280, 720);
  QScrollBar* scroll = bench.panel->scroll_area()->verticalScrollBar();
  ASSERT_GT(scroll->maximum(), 0);
  scroll->setValue(0);
  QSpinBox* steps = bench.panel->steps_field();
  ASSERT_FALSE(steps->hasFocus());
  const int value = steps->value();
  turn_wheel(steps, 2);
  EXPECT_EQ(steps->value(), value) << "the wheel changed a field the user only scrolled over";
  EXPECT_GT(scroll->value(), 0) << "the panel did not scroll";
  QComboBox* preset = bench.panel->preset_field();
  const int preset_index = preset->currentIndex();
  turn_wheel(preset, -1);
  EXPECT_EQ(preset->currentIndex(), preset_index);

  // A field the user clicked into takes the wheel.
  bench.window.activateWindow();
  ASSERT_TRUE(QTest::qWaitForWindowActive(&bench.window));
  steps->setFocus(Qt::MouseFocusReason);
  ASSERT_TRUE(steps->hasFocus());
  turn_wheel(steps, -1);  // up: one step more
  EXPECT_EQ(steps->value(), value + 1);
}

TEST(Window, AFieldErrorIsShownAtTheFieldInTheFormsWordsAndNothingMoves) {
  Bench bench;
  show_at(bench.window, 1280, 720);
  ExperimentPanel* panel = bench.panel;
  QSpinBox* heads = panel->findChild<QSpinBox*>("heads");
  ASSERT_NE(heads, nullptr);
  const auto layout_now = [&] {
    std::vector<QRect> rects;
    for (QWidget* widget : std::initializer_list<QWidget*>{
             heads, panel->policies_field(), panel->steps_field(), panel->run_button(),
             panel->problem_label(), panel->scroll_area()}) {
      rects.push_back(rect_in(widget, &bench.window));
    }
    return rects;
  };
  const auto before = layout_now();
  ASSERT_TRUE(bench.window.start_action()->isEnabled());
  ASSERT_NE(panel->findChild<QSpinBox*>("d_model")->value() % 7, 0);
  heads->setValue(7);  // does not divide d_model
  QApplication::processEvents();
  const QString problem = panel->problem();
  EXPECT_TRUE(problem.startsWith("Heads: 7 heads do not divide d_model")) << problem.toStdString();
  for (const char* word : {"spec", "--", "base."}) {
    EXPECT_FALSE(problem.contains(word)) << problem.toStdString();
  }
  EXPECT_TRUE(heads->property("invalid").toBool());
  EXPECT_TRUE(heads->toolTip().startsWith(problem));
  EXPECT_EQ(panel->problem_label()->text(), problem);
  EXPECT_TRUE(layout_now() == before) << "the layout moved when the error appeared";
  // Every way to start is off, and none of them starts anything.
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_FALSE(panel->check_button()->isEnabled());
  EXPECT_FALSE(bench.window.start_action()->isEnabled());
  EXPECT_FALSE(bench.window.check_action()->isEnabled());
  QSignalSpy requested(panel, &ExperimentPanel::sweepRequested);
  bench.window.start_action()->trigger();
  panel->request_run();
  EXPECT_EQ(requested.count(), 0);
  EXPECT_FALSE(bench.window.is_running());

  heads->setValue(4);
  QApplication::processEvents();
  EXPECT_TRUE(panel->problem().isEmpty());
  EXPECT_FALSE(heads->property("invalid").toBool());
  EXPECT_TRUE(bench.window.start_action()->isEnabled());
  EXPECT_TRUE(layout_now() == before);
}

TEST(Window, TheSegmentsPreviewShowsEveryPolicyInFull) {
  Bench bench;
  show_at(bench.window, 1280, 720);
  bench.panel->load_spec(rematlab::default_study_spec());  // four policies of a 12-block model
  QTest::qWait(50);                                        // the relayout is a posted event
  QPlainTextEdit* preview = bench.panel->segments_preview();
  for (const QString& policy : bench.panel->policies_field()->text().split(';')) {
    EXPECT_TRUE(preview->toPlainText().contains(policy.trimmed() + ": ")) << policy.toStdString();
  }
  // A fixed height (so nothing moves as policies are typed) that scrolls to the last policy.
  EXPECT_EQ(preview->minimumHeight(), preview->maximumHeight());
  preview->verticalScrollBar()->setValue(preview->verticalScrollBar()->maximum());
  QApplication::processEvents();
  const QString last = bench.panel->policies_field()->text().split(';').last().trimmed();
  const QTextBlock block = preview->document()->lastBlock();
  EXPECT_TRUE(block.text().startsWith(last + ": ")) << block.text().toStdString();
  EXPECT_TRUE(preview->viewport()->rect().intersects(preview->cursorRect(QTextCursor(block))))
      << "the last policy cannot be scrolled into view";
}

TEST(Window, PipelineStagesShowTheirBlocksAndMicroBatchesInFlight) {
  Bench bench;
  bench.panel->load_spec(rematlab::default_study_spec());  // a 12-block model
  bench.panel->ranks_field()->setValue(3);
  bench.panel->pipeline_stages_field()->setValue(3);
  bench.panel->accum_field()->setValue(4);
  QApplication::processEvents();
  const QString preview = bench.panel->segments_preview()->toPlainText();
  EXPECT_TRUE(preview.contains(
      "Stages (1F1B): 0: blocks 0–3, 3 in flight; 1: blocks 4–7, 2 in flight; 2: blocks 8–11, "
      "1 in flight"))
      << preview.toStdString();
  // Ranks train one run: one policy, no max-batch search.
  bench.panel->policies_field()->setText("every:1");
  bench.panel->max_batch_box()->setChecked(false);
  QApplication::processEvents();
  EXPECT_TRUE(bench.panel->problem().isEmpty()) << bench.panel->problem().toStdString();
  // Stages need their ranks: with one rank the form does not run one process instead.
  bench.panel->ranks_field()->setValue(1);
  QApplication::processEvents();
  EXPECT_TRUE(bench.panel->problem().startsWith("Pipeline stages: 3 stages need"))
      << bench.panel->problem().toStdString();
  bench.panel->ranks_field()->setValue(3);
  // Fewer micro-batches than stages: refused at Accumulation before Run.
  bench.panel->accum_field()->setValue(2);
  QApplication::processEvents();
  EXPECT_TRUE(bench.panel->problem().startsWith("Accumulation: 2 micro-batch(es) for 3 stages"))
      << bench.panel->problem().toStdString();
  // Two chunks a stage: each stage's two runs of blocks, and the interleaved schedule's passes
  // in flight (the first two stages all six of their three micro-batches' chunks).
  bench.panel->accum_field()->setValue(3);
  bench.panel->virtual_stages_field()->setValue(2);
  QApplication::processEvents();
  EXPECT_TRUE(bench.panel->problem().isEmpty()) << bench.panel->problem().toStdString();
  EXPECT_TRUE(bench.panel->segments_preview()->toPlainText().contains(
      "Stages (interleaved 1F1B): 0: blocks 0–1 and 6–7, 6 in flight; 1: blocks 2–3 and 8–9, 6 "
      "in flight; 2: blocks 4–5 and 10–11, 4 in flight"))
      << bench.panel->segments_preview()->toPlainText().toStdString();
  EXPECT_TRUE(bench.panel->summary().contains("blocks over 3 stages of 2 chunks"))
      << bench.panel->summary().toStdString();
  // Rounds of the stages: 4 micro-batches for 3 stages are refused at Accumulation.
  bench.panel->accum_field()->setValue(4);
  QApplication::processEvents();
  EXPECT_TRUE(bench.panel->problem().startsWith("Accumulation: 4 micro-batches: the interleaved"))
      << bench.panel->problem().toStdString();
  // Chunks without a pipeline are no plain run: refused at Virtual stages.
  bench.panel->accum_field()->setValue(3);
  bench.panel->pipeline_stages_field()->setValue(1);
  bench.panel->ranks_field()->setValue(1);
  QApplication::processEvents();
  EXPECT_TRUE(bench.panel->problem().startsWith("Virtual stages: model chunks per stage need"))
      << bench.panel->problem().toStdString();
}

TEST(FieldErrors, CoreErrorsAreSaidInTheFormsWords) {
  using rematlab::InvalidInput;
  using rematlab::ui::explain;
  const auto batch = explain(InvalidInput("spec: axes.batch[1]", "must be positive, got 0"));
  EXPECT_EQ(batch.key, "batch");
  EXPECT_EQ(batch.message(), "Micro-batch: must be positive, got 0");
  const auto budget = explain(InvalidInput("spec: max_batch.budget", "needs a budget"));
  EXPECT_EQ(budget.key, "budget");
  const InvalidInput wrapped("spec: axes (every:1 b8)", "kv_heads",
                             "3 key/value heads do not divide 4");
  EXPECT_STREQ(wrapped.what(),
               "spec: axes (every:1 b8): --kv-heads 3 key/value heads do not divide 4");
  const auto kv = explain(wrapped);
  EXPECT_EQ(kv.key, "kv_heads");
  EXPECT_EQ(kv.message(), "KV heads: 3 key/value heads do not divide 4");
  // As the spec's validation words it: the setting at fault, and the one its reason names.
  try {
    rematlab::expand_sweep(rematlab::parse_sweep_spec(nlohmann::ordered_json::parse(
        R"({"base": {"preset": "tiny", "heads": 3, "d_model": 64}, "axes": {"batch": [2]}})")));
    ADD_FAILURE() << "3 heads of a d_model of 64 were accepted";
  } catch (const InvalidInput& error) {
    EXPECT_EQ(explain(error).message(), "Heads: 3 heads do not divide d_model 64");
  }
  // The attention's finer fields by their labels too, not as command-line flags.
  try {
    rematlab::expand_sweep(rematlab::parse_sweep_spec(nlohmann::ordered_json::parse(
        R"({"base": {"preset": "tiny", "sliding_window": -4}, "axes": {"batch": [2]}})")));
    ADD_FAILURE() << "a negative window was accepted";
  } catch (const InvalidInput& error) {
    EXPECT_EQ(explain(error).message(), "Sliding window: must not be negative");
  }
  for (const char* key : {"head_dim", "rope_theta", "qkv_bias", "qk_norm", "sliding_window"})
    EXPECT_TRUE(rematlab::ui::form_label(key).has_value()) << key;
}

TEST(Window, TheFormIsAsTheUserLeftItAfterARestart) {
  QTemporaryDir dir;
  {
    MainWindow first(dir.filePath("runs.sqlite"));
    ExperimentPanel* panel = first.experiment_panel();
    panel->preset_field()->setCurrentText("small");
    panel->policies_field()->setText("none; every:2");
    panel->steps_field()->setValue(37);
    panel->batch_field()->setText("2, 4");
    panel->budget_field()->setText("300MiB");
    panel->findChild<QSpinBox*>("accum")->setValue(3);
    first.remember_form();
  }
  MainWindow second(dir.filePath("runs.sqlite"));
  ExperimentPanel* panel = second.experiment_panel();
  EXPECT_EQ(panel->preset_field()->currentText(), "small");
  EXPECT_EQ(panel->policies_field()->text(), "none; every:2");
  EXPECT_EQ(panel->steps_field()->value(), 37);
  EXPECT_EQ(panel->batch_field()->text(), "2, 4");
  EXPECT_EQ(panel->budget_field()->text(), "300MiB");
  EXPECT_EQ(panel->findChild<QSpinBox*>("accum")->value(), 3);
}

TEST(Window, GradientCheckWithoutACheckpointingPolicySaysSo) {
  Bench bench;
  bench.panel->policies_field()->setText("none");
  EXPECT_FALSE(bench.panel->check_button()->isEnabled());
  EXPECT_FALSE(bench.window.check_action()->isEnabled());
  EXPECT_TRUE(bench.panel->check_button()->toolTip().contains("No checkpointing policy"));
  EXPECT_FALSE(bench.panel->check_config().has_value());
  bench.panel->policies_field()->setText("none; none+disk; sublayer:1,2; every:1");
  ASSERT_TRUE(bench.panel->check_config().has_value());
  EXPECT_EQ(bench.panel->check_config()->checkpoint, "sublayer:1,2");
  EXPECT_TRUE(bench.panel->check_button()->isEnabled());
}

}  // namespace
