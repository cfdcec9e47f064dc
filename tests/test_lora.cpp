// Fine-tuning with low-rank adapters (model/lora.h): the adapted model begins as its base and
// only the adapters train; every checkpoint policy gives the gradients of `none` bit for bit;
// the adapters' gradients are what plain autograd gives for the merged weight W + (α/r)·B·A; the
// model states measured are the frozen weights and the adapters' training states, exactly; the
// CLI records the setting and refuses what it cannot run in one line.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "common/errors.h"
#include "estimate/fine_tuning.h"
#include "model/model_config.h"
#include "run/run_config.h"
#include "run/run_fields.h"
#include "scratch_dir.h"
#include "train/gradient_check.h"
#include "train/trainer.h"

namespace rematlab {
// Named, not anonymous: a unity batch shares one anonymous namespace between suites.
namespace lora_suite {

RunConfig lora_config(const std::string& preset, int64_t rank = 4) {
  RunConfig config;
  config.model = model_preset(preset);
  config.model.layers = 3;  // so every:2 has a short last segment
  config.model.lora = default_lora_options(config.model.family);
  config.model.lora.rank = rank;
  config.batch = 4;
  config.threads = 1;
  config.steps = 3;
  return config;
}

std::map<std::string, torch::Tensor> parameters_of(Trainer& trainer) {
  std::map<std::string, torch::Tensor> params;
  for (const auto& item : trainer.model()->named_parameters()) {
    params[item.key()] = item.value().detach().clone();
  }
  return params;
}

bool is_adapter(const std::string& name) { return name.find("_lora.") != std::string::npos; }

TEST(LoraAdapters, TheAdaptedModelBeginsAsItsBaseAndOnlyTheAdaptersTrain) {
  for (const char* preset : {"tiny", "llama-tiny"}) {
    SCOPED_TRACE(preset);
    RunConfig config = lora_config(preset);
    RunConfig full = config;
    full.model.lora = LoraOptions{};
    // Model states: the frozen weights (4 bytes each) and the adapters' weights, gradients and
    // AdamW's two moments (16 bytes each), beside the buffers, as the allocator counts them
    // (measured alone: a
    // trainer's tracker counts every tensor of the process while it is the newest).
    int64_t measured_states = 0;
    int64_t buffers = 0;  // Llama's rotary tables
    {
      Trainer alone(config);
      for (const torch::Tensor& buffer : alone.model()->buffers()) buffers += buffer.nbytes();
      measured_states = alone.run().baseline_bytes;
    }
    Trainer adapted(config);
    Trainer whole(full);
    const auto before = parameters_of(adapted);
    const auto base = parameters_of(whole);
    const RunSummary trained = adapted.run();
    const RunSummary reference = whole.run();
    const auto after = parameters_of(adapted);
    // The base is the model the same seed gives without adapters.
    int64_t adapters = 0;
    for (const auto& [name, value] : before) {
      if (is_adapter(name)) {
        adapters += value.numel();
        continue;
      }
      ASSERT_TRUE(base.count(name)) << name;
      EXPECT_TRUE(torch::equal(value, base.at(name))) << name;
    }
    EXPECT_EQ(adapters, config.model.adapter_parameter_count());
    EXPECT_EQ(config.model.trainable_parameter_count(), adapters);
    EXPECT_EQ(config.model.parameter_count(), full.model.parameter_count() + adapters);

    ASSERT_EQ(trained.status, RunStatus::kOk) << trained.message;
    // B starts at zero: the first loss is the base model's, to the bit.
    EXPECT_EQ(trained.steps.front().loss, reference.steps.front().loss);
    int64_t moved = 0;
    for (const auto& [name, value] : after) {
      if (is_adapter(name)) {
        moved += torch::equal(value, before.at(name)) ? 0 : 1;
      } else {
        EXPECT_TRUE(torch::equal(value, before.at(name))) << name << " trained";
      }
    }
    for (const auto& item : adapted.model()->named_parameters()) {
      // A frozen weight never had a gradient formed (nor held, nor updated).
      EXPECT_EQ(item.value().grad().defined(), is_adapter(item.key())) << item.key();
    }
    EXPECT_EQ(moved,
              static_cast<int64_t>(std::count_if(
                  after.begin(), after.end(), [](const auto& p) { return is_adapter(p.first); })));
    EXPECT_EQ(measured_states, 4 * config.model.base_parameter_count() + 16 * adapters + buffers);
    EXPECT_LT(measured_states, 16 * full.model.parameter_count());
    // The estimator counts the same states (buffers are not model states).
    EXPECT_EQ(measured_states,
              estimate::fine_tuning_state_bytes(estimate::from_model_config(config.model),
                                                Precision::kFp32, estimate::Optimizer::kAdamW)
                      .total() +
                  buffers);
  }
}

// Every policy recomputes the adapters as the forward ran them: after two steps (so that B and
// with it A's gradient are no longer zero), one step's gradients equal none's bit for bit.
TEST(LoraAdapters, EveryPolicyGivesTheAdaptersGradientsOfNoneBitForBit) {
  for (const char* preset : {"tiny", "llama-tiny"}) {
    for (const char* policy :
         {"every:1", "every:2", "sublayer:1,2", "sublayer:2,1", "selective", "keep:qkv",
          "keep:attn-out,mlp-in", "keep:matmul", "segments:a0-m0,m1,a2-m2", "schedule:0=1,0.5=2"}) {
      for (const AttentionKind attention : {AttentionKind::kSdpa, AttentionKind::kMath}) {
        RunConfig config = lora_config(preset);
        config.model.dropout = 0.1;
        config.model.attention = attention;
        config.accum = 2;
        config.checkpoint = policy;
        const GradientCheckResult result = check_gradients(config, nullptr, std::nullopt, 2);
        EXPECT_TRUE(result.identical) << preset << " " << policy << ": " << result.max_abs_diff
                                      << " in " << result.worst_param;
        EXPECT_EQ(result.loss_diff, 0.0) << preset << " " << policy;
        // Only the adapters have gradients: GPT 10 tensors a block (q, k and v share one A),
        // Llama 11 (gate and up too).
        EXPECT_EQ(result.params_compared, std::string(preset) == "tiny" ? 3 * 10 : 3 * 11);
      }
    }
  }
}

TEST(LoraAdapters, WithItsInputsOffloadedToDiskTheStepIsStillNones) {
  testing::ScratchDir dir("lora-offload");
  RunConfig config = lora_config("llama-tiny");
  config.checkpoint = "every:1";
  config.offload = "disk:" + dir.path();
  const GradientCheckResult result = check_gradients(config, nullptr, std::nullopt, 2);
  EXPECT_TRUE(result.identical) << result.max_abs_diff << " in " << result.worst_param;
}

// A bf16 base: the projections' weights are stored as the bf16 matmuls read them, so the model
// computes exactly what an fp32 base does under bf16 autocast, in half the bytes.
TEST(LoraAdapters, ABf16BaseComputesAsAnFp32OneUnderBf16AndHoldsHalfTheBytes) {
  RunConfig config = lora_config("llama-tiny");
  config.precision = Precision::kBf16;
  RunConfig stored = config;
  stored.model.lora.base = BasePrecision::kBf16;
  int64_t measured_states = 0;
  int64_t buffers = 0;
  {
    Trainer alone(stored);
    for (const torch::Tensor& buffer : alone.model()->buffers()) buffers += buffer.nbytes();
    for (const auto& item : alone.model()->named_parameters()) {
      const bool projection = item.key().find("_lora.") == std::string::npos &&
                              item.key().find("norm") == std::string::npos &&
                              item.key().find("embedding") == std::string::npos;
      EXPECT_EQ(item.value().scalar_type(), projection ? torch::kBFloat16 : torch::kFloat)
          << item.key();
    }
    measured_states = alone.run().baseline_bytes;
  }
  const int64_t projections = stored.model.projection_parameter_count();
  const int64_t base = stored.model.base_parameter_count();
  EXPECT_EQ(measured_states, 2 * projections + 4 * (base - projections) +
                                 16 * stored.model.adapter_parameter_count() + buffers);
  EXPECT_EQ(measured_states,
            estimate::fine_tuning_state_bytes(estimate::from_model_config(stored.model),
                                              Precision::kBf16, estimate::Optimizer::kAdamW)
                    .total() +
                buffers);
  Trainer as_stored(stored);
  Trainer as_trained(config);
  const RunSummary half = as_stored.run();
  const RunSummary full = as_trained.run();
  ASSERT_EQ(half.steps.size(), full.steps.size());
  for (std::size_t i = 0; i < half.steps.size(); ++i) {
    EXPECT_EQ(half.steps[i].loss, full.steps[i].loss) << "step " << i;
  }
  for (const char* policy : {"every:1", "selective", "keep:qkv", "sublayer:2,1"}) {
    stored.checkpoint = policy;
    const GradientCheckResult result = check_gradients(stored, nullptr, std::nullopt, 2);
    EXPECT_TRUE(result.identical) << policy << ": " << result.max_abs_diff;
  }
}

// The adapters' gradients against plain autograd of the same model with its adapters merged
// into its weights, W' = W + s·B·A: dL/dB = s·(dL/dW')·Aᵀ and dL/dA = s·Bᵀ·(dL/dW') on each
// adapted slice of W'.
TEST(LoraAdapters, AdapterGradientsAreThoseOfTheMergedWeight) {
  // Some projections (a fused projection's slices summed one by one), and all of them (its
  // B's as one block-diagonal matrix).
  const std::pair<const char*, uint32_t> cases[] = {
      {"tiny", kLoraQ | kLoraV | kLoraO | kLoraDown},
      {"tiny", kEveryLoraTarget & ~static_cast<uint32_t>(kLoraGate)},
      {"llama-tiny", kLoraK | kLoraGate | kLoraDown},
      {"llama-tiny", kEveryLoraTarget}};
  for (const auto& [preset, targets] : cases) {
    SCOPED_TRACE(std::string(preset) + " " + lora_targets_text(targets));
    RunConfig config = lora_config(preset, 3);
    config.model.lora.alpha = 6.0;
    config.model.lora.targets = targets;
    RunConfig full = config;
    full.model.lora = LoraOptions{};
    Trainer adapted(config);
    Trainer merged(full);
    const double scale = config.model.lora.scale();
    auto adapted_params = adapted.model()->named_parameters();
    auto merged_params = merged.model()->named_parameters();
    {
      torch::NoGradGuard no_grad;
      torch::manual_seed(7);
      for (auto& item : adapted_params) {
        if (item.key().find("_lora.b") != std::string::npos) item.value().normal_(0.0, 0.05);
      }
    }
    // Which rows of which projection each B adapts, from the shapes (the slices in order).
    const int64_t d = config.model.d_model;
    const int64_t hd = config.model.head_dim();
    const int64_t q = config.model.heads * hd;
    const int64_t kv = config.model.key_value_heads() * hd;
    const int64_t hidden = config.model.mlp_width();
    std::vector<std::pair<int64_t, int64_t>> qkv_rows, up_rows;
    if (config.model.lora.adapts(kLoraQ)) qkv_rows.push_back({0, q});
    if (config.model.lora.adapts(kLoraK)) qkv_rows.push_back({q, kv});
    if (config.model.lora.adapts(kLoraV)) qkv_rows.push_back({q + kv, kv});
    const bool gated = config.model.family == ModelFamily::kLlama;
    if (gated && config.model.lora.adapts(kLoraGate)) up_rows.push_back({0, hidden});
    if (config.model.lora.adapts(kLoraUp)) up_rows.push_back({gated ? hidden : 0, hidden});
    std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> rows_of = {
        {"attn.qkv", qkv_rows},
        {"attn.out", {{0, d}}},
        {"mlp.up", up_rows},
        {"mlp.down", {{0, d}}}};
    auto branch_of = [](const std::string& projection) {
      return projection == "attn.qkv"   ? "attn.qkv_lora"
             : projection == "attn.out" ? "attn.out_lora"
             : projection == "mlp.up"   ? "mlp.up_lora"
                                        : "mlp.down_lora";
    };
    const int64_t rank = config.model.lora.rank;
    {
      torch::NoGradGuard no_grad;
      for (int64_t block = 0; block < config.model.layers; ++block) {
        for (const auto& [projection, rows] : rows_of) {
          const std::string prefix = "block" + std::to_string(block) + "_";
          const std::string branch = prefix + branch_of(projection);
          if (!adapted_params.contains(branch + ".a")) continue;
          const torch::Tensor a = adapted_params[branch + ".a"];
          torch::Tensor w = merged_params[prefix + projection + ".weight"];
          for (std::size_t i = 0; i < rows.size(); ++i) {
            const torch::Tensor b = adapted_params[branch + ".b" + std::to_string(i)];
            w.narrow(0, rows[i].first, rows[i].second)
                .add_(scale * b.matmul(a.narrow(0, static_cast<int64_t>(i) * rank, rank)));
          }
        }
      }
    }
    const CheckpointPlan none = CheckpointPolicy::parse("none").plan_for(config.model.layers, 0.0);
    const std::optional<double> adapted_loss = adapted.accumulate_gradients(none);
    const std::optional<double> merged_loss = merged.accumulate_gradients(none);
    ASSERT_TRUE(adapted_loss && merged_loss);
    EXPECT_NEAR(*adapted_loss, *merged_loss, 1e-5 * std::abs(*merged_loss));
    int64_t compared = 0;
    for (int64_t block = 0; block < config.model.layers; ++block) {
      for (const auto& [projection, rows] : rows_of) {
        const std::string prefix = "block" + std::to_string(block) + "_";
        const std::string branch = prefix + branch_of(projection);
        if (!adapted_params.contains(branch + ".a")) continue;
        const torch::Tensor a = adapted_params[branch + ".a"];
        const torch::Tensor grad_w = merged_params[prefix + projection + ".weight"].grad();
        torch::Tensor expected_a = torch::zeros_like(a);
        for (std::size_t i = 0; i < rows.size(); ++i) {
          const auto first = static_cast<int64_t>(i) * rank;
          const torch::Tensor b = adapted_params[branch + ".b" + std::to_string(i)];
          const torch::Tensor slice = grad_w.narrow(0, rows[i].first, rows[i].second);
          const torch::Tensor expected_b = scale * slice.matmul(a.narrow(0, first, rank).t());
          const torch::Tensor got_b = b.grad();
          EXPECT_LE((got_b - expected_b).abs().max().item<double>(),
                    1e-4 * expected_b.abs().max().item<double>() + 1e-12)
              << branch << ".b" << i;
          expected_a.narrow(0, first, rank).copy_(scale * b.detach().t().matmul(slice));
          ++compared;
        }
        EXPECT_LE((a.grad() - expected_a).abs().max().item<double>(),
                  1e-4 * expected_a.abs().max().item<double>() + 1e-12)
            << branch << ".a";
      }
    }
    // Every adapted slice: q, k, v, o, gate, up and down as the targets name them.
    EXPECT_EQ(compared, config.model.layers * __builtin_popcount(targets));
  }
}

TEST(LoraCli, ARunRecordsItsAdaptersAndBadSettingsAreOneLine) {
  testing::ScratchDir dir("lora-cli");
  const std::string db = dir.file("runs.sqlite");
  const auto ran = testing::cli(
      "run --preset llama-tiny --finetune lora --lora-rank 4 --lora-alpha 8 "
      "--lora-targets q,v,down --steps 2 --threads 1 --json --db " +
      db);
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  const nlohmann::json run = testing::last_line_json(ran.out);
  EXPECT_EQ(run["finetune"], "lora");
  EXPECT_EQ(run["lora_rank"], 4);
  EXPECT_EQ(run["lora_alpha"], 8.0);
  EXPECT_EQ(run["lora_targets"], "q,v,down");
  RunConfig expected;
  expected.model = model_preset("llama-tiny");
  expected.model.lora = {4, 8.0, kLoraQ | kLoraV | kLoraDown};
  EXPECT_EQ(run["trainable_params"].get<int64_t>(), expected.model.adapter_parameter_count());
  EXPECT_EQ(run["params"].get<int64_t>(), expected.model.parameter_count());
  // What the database keeps is what runs again.
  const auto shown =
      testing::cli("show --db " + db + " " + std::to_string(run["run_id"].get<int64_t>()));
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  const nlohmann::json record = nlohmann::json::parse(shown.out)["config"];
  EXPECT_EQ(record["finetune"], "lora");
  EXPECT_EQ(record["lora_targets"], "q,v,down");
  const RunConfig read = run_config_from_record(record);
  EXPECT_EQ(read.model.lora.rank, 4);
  EXPECT_EQ(read.model.lora.alpha, 8.0);
  EXPECT_EQ(read.model.lora.targets, kLoraQ | kLoraV | kLoraDown);
  // A full run's record has no fine-tuning fields at all (its profile key is unchanged).
  EXPECT_FALSE(to_json(RunConfig{}).contains("finetune"));
  // plan: profiles the adapted model (its frozen embedding has no backward) and runs.
  const auto planned = testing::cli(
      "run --preset llama-tiny --finetune lora --lora-rank 4 --checkpoint plan:4MiB --steps 2 "
      "--threads 1 --json --db " +
      db);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const nlohmann::json plan_run = testing::last_line_json(planned.out);
  EXPECT_EQ(plan_run["status"], "ok");
  // Under this budget the plan recomputes part of the chain (none would not fit it).
  EXPECT_EQ(plan_run["plan"]["chosen"].get<std::string>().rfind("segments:", 0), 0u)
      << plan_run["plan"].dump();
  // Fields of a spec or config file: LoRA's settings only after finetune lora, in any order.
  EXPECT_THROW(run_config_from_fields({{"lora_rank", 8}}, "spec"), InvalidInput);
  EXPECT_THROW(run_config_from_fields({{"lora_rank", 8}, {"finetune", "full"}}, "spec"),
               InvalidInput);
  EXPECT_THROW(run_config_from_fields({{"lora_alpha", 0}, {"finetune", "lora"}}, "spec"),
               InvalidInput);
  const RunConfig gpt = run_config_from_fields(
      {{"lora_targets", "all"}, {"preset", "tiny"}, {"lora_rank", 8}, {"finetune", "lora"}},
      "spec");
  EXPECT_EQ(gpt.model.lora.rank, 8);
  EXPECT_EQ(gpt.model.lora.targets, default_lora_options(ModelFamily::kGpt).targets);

  const std::pair<std::string, const char*> refused[] = {
      {"run --preset tiny --lora-rank 4", "--lora-rank"},
      {"run --preset tiny --finetune partial", "--finetune"},
      {"run --preset tiny --finetune lora --lora-rank 0", "--lora-rank"},
      {"run --preset tiny --finetune lora --lora-alpha -1", "--lora-alpha"},
      {"run --preset tiny --finetune lora --lora-targets q,x", "--lora-targets"},
      {"run --preset tiny --finetune lora --lora-targets q,", "--lora-targets"},
      {"run --preset tiny --finetune lora --lora-targets ''", "--lora-targets"},
      {"run --preset tiny --finetune ''", "--finetune"},
      {"estimate --params 7e9 --finetune lora", "--params"},
      {"run --preset tiny --finetune lora --lora-targets gate", "--lora-targets"},
      // Data ranks shard the adapters' states; neither the frozen base nor tensor ranks yet.
      {"run --preset tiny --finetune lora --nproc 2 --shard parameters", "--shard"},
      {"run --preset tiny --finetune lora --nproc 2 --tp 2", "--tp"},
      {"run --preset tiny --base-precision bf16", "--base-precision"},
      {"run --preset tiny --finetune lora --base-precision bf16", "--base-precision"},
      {"run --preset tiny --finetune lora --base-precision nf8", "--base-precision"},
      {"estimate --model llama-tiny --finetune lora --nproc 2 --shard parameters", "--shard"},
      {"estimate --model llama-tiny --finetune lora --nproc 2 --tp 2", "--tp"},
      {"estimate --model llama-tiny --finetune lora --base-precision bf16", "--base-precision"},
      {"layout --model llama-tiny --gpu a100-80gb --gpus 2 --seq-len 64 --global-batch 4 "
       "--finetune lora --tp 2",
       "--tp"},
      {"layout --model llama-tiny --gpu a100-80gb --gpus 2 --seq-len 64 --global-batch 4 "
       "--finetune lora --zero 3",
       "--zero"},
      {"layout --model llama-tiny --gpu a100-80gb --gpus 1 --seq-len 64 --global-batch 4 "
       "--finetune lora --base-precision bf16 --precision fp32",
       "--base-precision"},
  };
  for (const auto& [arguments, flag] : refused) {
    const bool runs = arguments.rfind("run ", 0) == 0;
    const auto result = testing::cli(arguments + (runs ? " --db " + db : ""));
    EXPECT_EQ(result.exit_code, 2) << arguments << "\n" << result.err;
    EXPECT_EQ(testing::count_lines(result.err), 1) << result.err;
    EXPECT_NE(result.err.find(flag), std::string::npos) << arguments << "\n" << result.err;
  }
}

}  // namespace lora_suite
}  // namespace rematlab
