// Sweeps: spec validation that names the key, expansion, the max-batch search (against a known
// answer and against real training), and unattended runs recorded in a real database.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <limits>

#include "common/errors.h"
#include "common/posix_files.h"
#include "run/batch_probe.h"
#include "run/run_fields.h"
#include "scratch_dir.h"
#include "store/run_store.h"
#include "store/run_writer.h"
#include "store/step_fields.h"
#include "sweep/max_batch.h"
#include "sweep/point_wire.h"
#include "sweep/sweep_runner.h"
#include "sweep/sweep_spec.h"

namespace rematlab {
namespace {

nlohmann::ordered_json spec_json(const std::string& text) {
  return nlohmann::ordered_json::parse(text);
}

std::string rejected_field(const std::string& text) {
  try {
    parse_sweep_spec(spec_json(text));
  } catch (const InvalidInput& error) {
    return error.field();
  }
  return "accepted";
}

TEST(SweepSpec, ErrorsNameTheKey) {
  EXPECT_EQ(rejected_field(R"({"nmae": "x"})"), "spec: nmae");
  EXPECT_EQ(rejected_field(R"({"base": {"bacth": 8}})"), "spec: base.bacth");
  EXPECT_EQ(rejected_field(R"({"base": {"batch": "8"}})"), "spec: base.batch");
  EXPECT_EQ(rejected_field(R"({"axes": {"checkpoint": []}})"), "spec: axes.checkpoint");
  EXPECT_EQ(rejected_field(R"({"axes": {"checkpoint": "none"}})"), "spec: axes.checkpoint");
  EXPECT_EQ(rejected_field(R"({"axes": {"checkpoint": ["none", "every:0"]}})"),
            "spec: axes.checkpoint[1]");
  EXPECT_EQ(rejected_field(R"({"axes": {"batch": [4, -1]}})"), "spec: axes.batch[1]");
  EXPECT_EQ(rejected_field(R"({"axes": {"colour": [1]}})"), "spec: axes.colour");
  EXPECT_EQ(rejected_field(R"({"repeats": 0})"), "spec: repeats");
  // A base field at fault is named as such, even when an axis is being checked.
  EXPECT_EQ(rejected_field(R"({"base": {"d_model": 64, "heads": 5},
                               "axes": {"checkpoint": ["none", "every:1"]}})"),
            "spec: base.heads");
  EXPECT_EQ(rejected_field(R"({"max_batch": {"limit": 8}})"), "spec: max_batch.budget");
  EXPECT_EQ(rejected_field(R"({"max_batch": {"budget": "lots"}})"), "spec: max_batch.budget");
  EXPECT_EQ(rejected_field(R"({"base": {"preset": "tiny"}, "axes": {"batch": [2]}})"), "accepted");
  EXPECT_EQ(rejected_field(R"({"base": {"tf32": 1}})"), "spec: base.tf32");
  EXPECT_EQ(rejected_field(R"({"base": {"loss_scale": 0.5}})"), "spec: base.loss_scale");
}

TEST(SweepSpec, TheModelFamilyIsAnAxis) {
  const SweepSpec spec = parse_sweep_spec(spec_json(R"({
    "base": {"preset": "small", "kv_heads": 4, "loss_chunks": "auto"},
    "axes": {"arch": ["gpt", "llama"]}})"));
  const auto points = expand_sweep(spec);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].config.model.family, ModelFamily::kGpt);
  EXPECT_EQ(points[1].config.model.family, ModelFamily::kLlama);
  EXPECT_EQ(points[1].config.model.key_value_heads(), 4);
  EXPECT_EQ(points[1].config.model.loss_chunks, kAutoLossChunks);
  EXPECT_EQ(points[1].label, "arch=llama");
  EXPECT_THROW(parse_sweep_spec(spec_json(R"({"axes": {"arch": ["gpt", "mamba"]}})")),
               InvalidInput);
}

// A family or fine-tuning axis resets what it governs before the base's own fields apply, as in
// one run's fields: a LoRA sweep over families stays LoRA with the base's rank and each family's
// targets, and a base's rank survives a finetune axis in whatever order the axes are written.
TEST(SweepSpec, FamilyAndFinetuneAxesKeepTheBasesOwnFields) {
  const auto over_families = expand_sweep(parse_sweep_spec(spec_json(R"({
    "base": {"preset": "tiny", "finetune": "lora", "lora_rank": 4},
    "axes": {"arch": ["gpt", "llama"]}})")));
  ASSERT_EQ(over_families.size(), 2u);
  for (const SweepPoint& point : over_families) {
    EXPECT_TRUE(point.config.model.lora.enabled()) << point.label;
    EXPECT_EQ(point.config.model.lora.rank, 4) << point.label;
    EXPECT_EQ(point.config.model.lora.targets,
              default_lora_options(point.config.model.family).targets)
        << point.label;
  }
  EXPECT_EQ(over_families[1].config.model.family, ModelFamily::kLlama);
  const auto ranks = expand_sweep(parse_sweep_spec(spec_json(R"({
    "base": {"preset": "llama-tiny", "lora_alpha": 8},
    "axes": {"lora_rank": [2, 8], "finetune": ["lora"]}})")));
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].config.model.lora.rank, 2);
  EXPECT_EQ(ranks[1].config.model.lora.rank, 8);
  EXPECT_EQ(ranks[1].config.model.lora.alpha, 8.0);
  // Full against LoRA with a rank in the base: the rank has no meaning for the full run; said.
  EXPECT_EQ(rejected_field(R"({"base": {"lora_rank": 4}, "axes": {"finetune": ["full", "lora"]}})"),
            "spec: base.lora_rank");
  EXPECT_EQ(rejected_field(R"({"axes": {"finetune": ["lora", "qlora"]}})"),
            "spec: axes.finetune[1]");
  EXPECT_EQ(rejected_field(R"({"axes": {"finetune": ["qlora", "lora"]}})"),
            "spec: axes.finetune[0]");
  EXPECT_EQ(rejected_field(R"({"axes": {"arch": ["gptx", "llama"]}})"), "spec: axes.arch[0]");
}

// config.json files as a spec's models: in the base or as an axis (Llama against Qwen at the
// same shape flags), each path beside the spec file, recorded as "qwen2 from PATH", with what
// the file holds that RematLab does not model said once per file; a record never reads one.
TEST(SweepSpec, ConfigJsonFilesAreTheModelsOfASweep) {
  testing::ScratchDir dir("model-config-spec");
  files::make_directories(dir.file("configs"));
  std::ofstream(dir.file("configs/qwen.json"))
      << R"({"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
            "vocab_size": 256, "max_position_embeddings": 64, "hidden_act": "gelu"})";
  std::ofstream(dir.file("configs/gpt.json"))
      << R"({"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 64,
            "vocab_size": 256})";
  std::ofstream(dir.file("spec.json")) << R"({"base": {"layers": 2, "batch": 2},
            "axes": {"model_config": ["configs/qwen.json", "configs/gpt.json"]}})";
  const SweepSpec spec = load_sweep_spec(dir.file("spec.json"));
  const auto points = expand_sweep(spec);
  ASSERT_EQ(points.size(), 2u);
  const ModelConfig& qwen = points[0].config.model;
  EXPECT_EQ(qwen.family, ModelFamily::kLlama);
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_EQ(qwen.key_value_heads(), 2);
  EXPECT_EQ(qwen.mlp_hidden, 128);
  EXPECT_EQ(qwen.layers, 2);  // the base's field refines the file's shape
  EXPECT_EQ(points[0].config.preset, "qwen2 from " + dir.file("configs/qwen.json"));
  EXPECT_EQ(points[1].config.model.family, ModelFamily::kGpt);
  EXPECT_EQ(points[1].config.model.layers, 2);
  EXPECT_EQ(points[1].config.preset, "gpt2 from " + dir.file("configs/gpt.json"));
  ASSERT_EQ(spec.warnings.size(), 2u);
  EXPECT_EQ(spec.warnings[0].rfind("spec: axes.model_config[0]: hidden_act gelu", 0), 0u)
      << spec.warnings[0];
  // GPT-2's configurations default to the tanh GELU, which the engine does not use.
  EXPECT_EQ(spec.warnings[1].rfind("spec: axes.model_config[1]: activation_function", 0), 0u)
      << spec.warnings[1];
  // In the base, with LoRA on the file's family.
  const auto lora = expand_sweep(
      parse_sweep_spec(spec_json(R"({"base": {"model_config": ")" + dir.file("configs/qwen.json") +
                                 R"(", "finetune": "lora", "lora_rank": 4}})")));
  ASSERT_EQ(lora.size(), 1u);
  EXPECT_EQ(lora[0].config.model.lora.targets, default_lora_options(ModelFamily::kLlama).targets);
  EXPECT_EQ(lora[0].config.model.layers, 4);
  // Wrong: beside a preset, a file that is not there, not a path.
  EXPECT_EQ(rejected_field(R"({"base": {"preset": "tiny", "model_config": ")" +
                           dir.file("configs/qwen.json") + R"("}})"),
            "spec: base.model_config");
  EXPECT_EQ(rejected_field(R"({"axes": {"model_config": [")" + dir.file("configs/qwen.json") +
                           R"(", ")" + dir.file("none.json") + R"("]}})"),
            "spec: axes.model_config[1]");
  EXPECT_EQ(rejected_field(R"({"base": {"model_config": 5}})"), "spec: base.model_config");
  // A record holds the shape; a file it names is not read, and the field is said unread.
  std::vector<std::string> unread;
  const RunConfig record = run_config_from_record(
      {{"model_config", dir.file("configs/qwen.json")}, {"batch", 3}}, &unread);
  EXPECT_EQ(unread, std::vector<std::string>{"model_config"});
  // A mistral-7b run recorded before that preset had a window trained on the whole sequence.
  const RunConfig older = run_config_from_record({{"preset", "mistral-7b"}, {"batch", 1}});
  EXPECT_EQ(older.model.sliding_window, 0);
  RunConfig windowed;
  windowed.preset = "mistral-7b";
  windowed.model = model_preset("mistral-7b");
  ASSERT_EQ(windowed.model.sliding_window, 4096);
  EXPECT_EQ(run_config_from_record(to_json(windowed)).model.sliding_window, 4096);
  EXPECT_EQ(record.model.family, ModelFamily::kGpt);
  EXPECT_EQ(record.batch, 3);
}

TEST(SweepSpec, GpuSwitchesAreRunFields) {
  const SweepSpec spec = parse_sweep_spec(spec_json(
      R"({"base": {"tf32": true, "deterministic": true, "loss_scale": 1024,
                   "loss_scale_growth_interval": 50}})"));
  const std::vector<SweepPoint> points = expand_sweep(spec);
  ASSERT_EQ(points.size(), 1u);
  EXPECT_TRUE(points[0].config.tf32);
  EXPECT_TRUE(points[0].config.deterministic);
  EXPECT_EQ(points[0].config.loss_scale, 1024.0);
  EXPECT_EQ(points[0].config.loss_scale_growth_interval, 50);
}

TEST(SweepSpec, ExpandsEveryCombinationInOrderAndSkipsOffloadWithoutCheckpointing) {
  const SweepSpec spec = parse_sweep_spec(spec_json(R"({
    "base": {"preset": "tiny", "steps": 3},
    "axes": {"checkpoint": ["none", "every:1"], "offload": ["none", "disk"], "batch": [2, 4]},
    "repeats": 2})"));
  std::vector<std::string> skipped;
  const auto points = expand_sweep(spec, &skipped);
  ASSERT_EQ(points.size(), 3u * 2u * 2u);  // (none,none) (every:1,none) (every:1,disk) × batch × 2
  EXPECT_EQ(skipped.size(), 2u);           // none + disk, at both batches
  EXPECT_EQ(points[0].label, "checkpoint=none offload=none batch=2 #1");
  EXPECT_EQ(points[1].label, "checkpoint=none offload=none batch=2 #2");
  EXPECT_EQ(points[2].config.batch, 4);
  EXPECT_EQ(points.back().config.checkpoint, "every:1");
  EXPECT_EQ(points.back().config.offload, "disk");
  EXPECT_EQ(points.back().config.steps, 3);
}

TEST(SweepSpec, APolicyAxisCanCarryItsOwnOffload) {
  const auto points = expand_sweep(parse_sweep_spec(spec_json(R"({
    "base": {"preset": "tiny"},
    "axes": {"checkpoint": ["none", "every:1", "every:1+disk"]}})")));
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points[1].config.offload, "none");
  EXPECT_EQ(points[2].config.checkpoint, "every:1");
  EXPECT_EQ(points[2].config.offload, "disk");
  EXPECT_EQ(rejected_field(R"({"axes": {"checkpoint": ["every:1+tape"]}})").rfind("spec: ", 0), 0u);
}

TEST(SweepSpec, APolicyIsRecordedUnderItsCanonicalName) {
  // Two spellings of one policy are one policy in the database, the comparison and the CSV.
  const auto points = expand_sweep(parse_sweep_spec(spec_json(R"({
    "base": {"preset": "tiny"},
    "axes": {"checkpoint": ["keep:mlp-in,qkv", "segments:a0-a0,m1+disk"]}})")));
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].config.checkpoint, "keep:qkv,mlp-in");
  EXPECT_EQ(points[1].config.checkpoint, "segments:a0,m1");
  EXPECT_EQ(points[1].config.offload, "disk");
}

TEST(SweepSpec, MaxBatchReplacesTheBatchAxis) {
  const SweepSpec spec = parse_sweep_spec(spec_json(R"({
    "base": {"preset": "tiny"},
    "axes": {"checkpoint": ["none", "every:1"], "batch": [2, 4, 8]},
    "max_batch": {"budget": "64MiB", "limit": 32}})"));
  const auto points = expand_sweep(spec);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_TRUE(points[0].request.max_batch.has_value());
  EXPECT_EQ(points[0].config.budget_bytes, 64 << 20);
}

// A sweep of one point (no axes) names its run after the policy it trains, not the experiment:
// that is what the Runs table, the legends and the comparison show.
TEST(SweepSpec, ALonePointIsNamedAfterItsPolicy) {
  const auto plain = expand_sweep(parse_sweep_spec(spec_json(R"({"name": "study",
    "base": {"preset": "tiny", "checkpoint": "every:1", "batch": 4}})")));
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].label, "every:1 b4");
  const auto searched = expand_sweep(parse_sweep_spec(spec_json(R"({"name": "study",
    "base": {"preset": "tiny", "checkpoint": "every:1", "batch": 4},
    "max_batch": {"budget": "64MiB"}})")));
  ASSERT_EQ(searched.size(), 1u);
  EXPECT_EQ(searched[0].label, "every:1 b=max");
}

// Memory that grows with the batch; the first batch that does not fit is `threshold + 1`.
MaxBatchResult search_against(int64_t threshold, int64_t limit) {
  return search_max_batch(limit, [&](int64_t batch) {
    BatchProbe probe;
    probe.batch = batch;
    probe.peak_bytes = 1000 * batch;
    probe.status = batch <= threshold ? RunStatus::kOk : RunStatus::kOom;
    return probe;
  });
}

TEST(MaxBatch, FindsTheLargestFittingBatchByDoublingThenBisection) {
  for (int64_t threshold : {0, 1, 2, 3, 5, 8, 37, 63, 64, 100, 511}) {
    const MaxBatchResult result = search_against(threshold, 512);
    EXPECT_EQ(result.max_batch, threshold) << "threshold " << threshold;
    EXPECT_EQ(result.peak_bytes, 1000 * threshold);
    // Doubling and bisection: about 2·log2(answer) probes, never a linear scan.
    const double bound = 2.0 * std::log2(static_cast<double>(std::max<int64_t>(threshold, 1))) + 3;
    EXPECT_LE(static_cast<double>(result.probes.size()), bound) << "threshold " << threshold;
  }
  EXPECT_EQ(search_against(10000, 48).max_batch, 48);  // everything fits: the limit
}

TEST(MaxBatch, AgreesWithTrainingOnEitherSideOfTheAnswer) {
  RunConfig base;
  base.model = model_preset("tiny");
  base.threads = 1;
  base.checkpoint = "every:1";
  // Room for the model state and a few sequences' activations.
  base.budget_bytes = 12 << 20;
  const MaxBatchResult result = search_max_batch(
      256, [&](int64_t batch) { return probe_by_training(base, batch, 2, nullptr); });
  ASSERT_GT(result.max_batch, 1);
  ASSERT_LT(result.max_batch, 256);
  const BatchProbe at = probe_by_training(base, result.max_batch, 2, nullptr);
  const BatchProbe above = probe_by_training(base, result.max_batch + 1, 2, nullptr);
  EXPECT_EQ(at.status, RunStatus::kOk);
  EXPECT_LE(at.peak_bytes, base.budget_bytes);
  EXPECT_EQ(above.status, RunStatus::kOom);
  EXPECT_GT(above.peak_bytes, base.budget_bytes);
}

class TempDatabase {
 public:
  TempDatabase()
      : path_(files::join(files::temp_directory(),
                          "rematlab-sweep-test-" + std::to_string(::getpid()) + ".sqlite")) {}
  ~TempDatabase() {
    for (const char* suffix : {"", "-wal", "-shm"}) files::remove_file(path_ + suffix);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(SweepRunner, RecordsEveryRunAndGoesOnPastAnOom) {
  TempDatabase db;
  RunStore store(db.path());
  // The second batch cannot fit the budget: that run ends oom and the sweep continues.
  const SweepSpec spec = parse_sweep_spec(spec_json(R"({
    "name": "oom in the middle",
    "base": {"preset": "tiny", "steps": 3, "threads": 1, "budget": "12MiB"},
    "axes": {"batch": [2, 512, 4]}})"));
  std::vector<SweepRunResult> results;
  {
    RunWriter writer(db.path());
    SweepRunner runner(spec, &writer);
    int64_t progress_calls = 0;
    SweepCallbacks callbacks;
    callbacks.on_progress = [&](const SweepProgress& progress) {
      ++progress_calls;
      EXPECT_EQ(progress.run_count, 3);
    };
    results = runner.run(callbacks);
    EXPECT_GT(progress_calls, 3);
  }
  ASSERT_EQ(results.size(), 3u);
  const auto runs = store.runs();
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].status, RunStatus::kOk);
  EXPECT_EQ(runs[1].status, RunStatus::kOom);
  EXPECT_EQ(runs[2].status, RunStatus::kOk);
  EXPECT_EQ(runs[0].experiment, "oom in the middle");
  EXPECT_EQ(runs[0].steps_recorded, 3);
  EXPECT_EQ(runs[2].config.batch, 4);
  EXPECT_EQ(runs[2].result.steps_completed, 3);
  EXPECT_EQ(store.experiments().at(0).spec.at("name"), "oom in the middle");
}

TEST(SweepRunner, MaxBatchRowsRecordTheirProbes) {
  TempDatabase db;
  RunStore store(db.path());
  const SweepSpec spec = parse_sweep_spec(spec_json(R"({
    "base": {"preset": "tiny", "steps": 2, "threads": 1},
    "axes": {"checkpoint": ["none", "every:1"]},
    "max_batch": {"budget": "12MiB", "limit": 256}})"));
  std::vector<SweepRunResult> results;
  {
    RunWriter writer(db.path());
    results = SweepRunner(spec, &writer).run({});
  }
  ASSERT_EQ(results.size(), 2u);
  ASSERT_TRUE(results[0].search && results[1].search);
  // Checkpointing every block fits a larger batch under the same budget.
  EXPECT_GT(results[1].search->max_batch, results[0].search->max_batch);
  for (const auto& result : results) {
    EXPECT_EQ(result.summary.config.batch, result.search->max_batch);
    EXPECT_EQ(store.probes(*result.run_id).size(), result.search->probes.size());
    EXPECT_EQ(store.run(*result.run_id).status, RunStatus::kOk);
  }
}

TEST(SweepRunner, CancelMarksTheCurrentRunCancelledAndStops) {
  TempDatabase db;
  RunStore store(db.path());
  const SweepSpec spec = parse_sweep_spec(spec_json(R"({
    "base": {"preset": "tiny", "steps": 50, "threads": 1},
    "axes": {"checkpoint": ["none", "every:1", "every:2"]}})"));
  std::atomic<bool> cancel{false};
  {
    RunWriter writer(db.path());
    SweepCallbacks callbacks;
    callbacks.cancel = &cancel;
    callbacks.on_progress = [&](const SweepProgress& progress) {
      if (progress.run_index == 1 && progress.step && progress.step->step == 3) cancel = true;
    };
    SweepRunner(spec, &writer).run(callbacks);
  }
  const auto runs = store.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].status, RunStatus::kOk);
  EXPECT_EQ(runs[1].status, RunStatus::kCancelled);
  EXPECT_EQ(runs[1].steps_recorded, 4);
}

TEST(PointWire, AStepAndAnOutcomeCrossToTheCoordinatorExactly) {
  // What a sweep worker sends is what the coordinator records: every field, non-finite values
  // and the last bits of doubles included.
  StepMetrics step;
  step.step = 4;
  step.total_steps = 9;
  step.warmup = true;
  step.loss = std::nan("");
  step.grad_norm = std::numeric_limits<double>::infinity();
  step.step_ms = 0.1 + 0.2;
  step.peak_bytes = (int64_t{1} << 40) + 3;
  step.rss_peak_bytes = 77;
  step.comm_wait_ms = 1e-300;
  const StepMetrics back = step_from_json(nlohmann::json::parse(step_to_json(step).dump()));
  for (const StepField& field : step_fields()) {
    EXPECT_EQ(step_field_text(back, field), step_field_text(step, field)) << field.name;
  }
  EXPECT_THROW(step_from_json(nlohmann::json{{"peak_bytes", "many"}}), std::invalid_argument);

  PointOutcome outcome;
  outcome.summary.status = RunStatus::kOom;
  outcome.summary.message = "no batch fits the budget, not even 1";
  outcome.summary.config.checkpoint = "every:2";
  outcome.summary.config.batch = 0;  // what a search that fitted nothing trained at
  outcome.summary.peak_bytes = 123456789;
  outcome.summary.final_loss = std::nan("");
  outcome.summary.peak_flops = 2.5e11;
  outcome.summary.timeline = {{0.5, 10, MemoryPhase::kForward}, {1.25, 20, MemoryPhase::kBackward}};
  outcome.summary.timeline_step = 2;
  MaxBatchResult search;
  search.max_batch = 0;
  search.probes = {{1, RunStatus::kOom, 999, "over the budget"}};
  outcome.search = search;
  const PointOutcome read = point_outcome_from_json(nlohmann::json::parse(to_json(outcome).dump()));
  EXPECT_EQ(read.summary.status, RunStatus::kOom);
  EXPECT_EQ(read.summary.message, outcome.summary.message);
  EXPECT_FALSE(read.engine_failed);
  EXPECT_EQ(read.summary.config.checkpoint, "every:2");
  EXPECT_EQ(read.summary.config.batch, 0);
  EXPECT_EQ(read.summary.peak_bytes, 123456789);
  EXPECT_TRUE(std::isnan(read.summary.final_loss));
  EXPECT_EQ(read.summary.config.peak_flops, 2.5e11);
  ASSERT_EQ(read.summary.timeline.size(), 2u);
  EXPECT_EQ(read.summary.timeline[1].time_ms, 1.25);
  EXPECT_EQ(read.summary.timeline[1].phase, MemoryPhase::kBackward);
  EXPECT_EQ(read.summary.timeline_step, 2);
  ASSERT_TRUE(read.search.has_value());
  ASSERT_EQ(read.search->probes.size(), 1u);
  EXPECT_EQ(read.search->probes[0].status, RunStatus::kOom);
  EXPECT_EQ(read.search->probes[0].message, "over the budget");
  EXPECT_EQ(to_json(read).dump(), to_json(outcome).dump());
}

TEST(PointWire, AProbeWithoutWholeNonNegativeCountsIsRefused) {
  // A float batch or a negative peak from a broken worker would otherwise convert silently.
  const nlohmann::json good = probe_on_the_wire({3, RunStatus::kOk, 4096, ""});
  EXPECT_EQ(batch_probe_from_json(good).peak_bytes, 4096);
  for (const char* key : {"batch", "peak_bytes"}) {
    for (const nlohmann::json& bad :
         {nlohmann::json(2.5), nlohmann::json(-1), nlohmann::json(1e30), nlohmann::json("8")}) {
      nlohmann::json probe = good;
      probe[key] = bad;
      EXPECT_THROW(batch_probe_from_json(probe), std::invalid_argument) << key << " " << bad;
    }
  }
}

// The coordinator records what a worker sends: a config setting it cannot read (a worker of a
// newer build, or an edited message) would be recorded as its default, so the outcome is refused
// with one error naming it (the coordinator then fails that point, saying why).
TEST(PointWire, AnOutcomeWithASettingThisVersionCannotReadIsRefusedNamingIt) {
  PointOutcome outcome;
  outcome.summary.status = RunStatus::kOk;
  outcome.summary.config.checkpoint = "every:1";
  const nlohmann::json good = to_json(outcome);
  EXPECT_EQ(point_outcome_from_json(good).summary.config.checkpoint, "every:1");
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"future_setting", 3}, {"finetune", "qlora"}, {"precision", "fp4"}}) {
    nlohmann::json sent = good;
    sent["config"][key] = value;
    try {
      point_outcome_from_json(sent);
      ADD_FAILURE() << key << " was read as its default";
    } catch (const std::invalid_argument& error) {
      const std::string what = error.what();
      EXPECT_NE(what.find("not known to this version (a newer RematLab or a hand edit): " + key),
                std::string::npos)
          << what;
    }
  }
  nlohmann::json not_an_object = good;
  not_an_object["config"] = nlohmann::json::array({1, 2});
  EXPECT_THROW(point_outcome_from_json(not_an_object), std::invalid_argument);
}

// A sweep spec's `budget` given as a number is bytes, read as every integer field is: a float, a
// value past INT64_MAX (which get<int64_t> wrapped to -1: no budget) or a negative one is
// refused, naming the field; a size text and 0 (no budget) are read.
TEST(RunFields, ABudgetNumberIsACheckedWholeNonNegativeCount) {
  auto budget = [](const nlohmann::json& value) {
    RunConfig config;
    apply_run_field(config, "budget", value, "spec: base.budget");
    return config.budget_bytes;
  };
  EXPECT_EQ(budget(1048576), 1048576);
  EXPECT_EQ(budget("1MiB"), 1048576);
  EXPECT_EQ(budget(0), 0);
  for (const nlohmann::json& bad :
       {nlohmann::json(std::numeric_limits<uint64_t>::max()), nlohmann::json(1.5e9),
        nlohmann::json(-5), nlohmann::json(true), nlohmann::json("lots")}) {
    try {
      budget(bad);
      ADD_FAILURE() << bad.dump() << " was read";
    } catch (const InvalidInput& error) {
      EXPECT_EQ(error.field(), "spec: base.budget") << bad.dump();
    }
  }
  EXPECT_EQ(rejected_field(R"({"base": {"budget": 18446744073709551615}})"), "spec: base.budget");
  EXPECT_EQ(rejected_field(R"({"base": {"budget": 2.5}})"), "spec: base.budget");
  // A record is tolerant: such a budget is named as unread rather than read wrapped.
  std::vector<std::string> unread;
  run_config_from_record({{"budget", std::numeric_limits<uint64_t>::max()}}, &unread);
  EXPECT_EQ(unread, std::vector<std::string>{"budget"});
}

// Every 64-bit seed (--seed takes one) reads back from the record and over the wire, rather than
// showing as unread there (and failing a sweep point on the coordinator).
TEST(RunFields, ASeedPastInt64ReadsBackFromItsRecord) {
  RunConfig config;
  config.seed = std::numeric_limits<uint64_t>::max();
  std::vector<std::string> unread;
  EXPECT_EQ(run_config_from_record(to_json(config), &unread).seed, config.seed);
  EXPECT_TRUE(unread.empty()) << ::testing::PrintToString(unread);
  PointOutcome outcome;
  outcome.summary.config = config;
  const PointOutcome read = point_outcome_from_json(nlohmann::json::parse(to_json(outcome).dump()));
  EXPECT_EQ(read.summary.config.seed, config.seed);
  // A negative one is still no seed.
  run_config_from_record({{"seed", -1}}, &unread);
  EXPECT_EQ(unread, std::vector<std::string>{"seed"});
}

}  // namespace
}  // namespace rematlab
