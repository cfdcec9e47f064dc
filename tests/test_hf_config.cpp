// Hugging Face configurations as RematLab's models (core/model/hf_config.h): the shipped ones
// give their published parameter counts (less exactly what a warning says is left out), every
// field is modelled, inert or named, bad files are one line, and the CLI's commands take them.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "common/errors.h"
#include "model/hf_config.h"
#include "run/run_config.h"
#include "run/run_fields.h"
#include "scratch_dir.h"

namespace rematlab {
namespace {

std::string shipped(const std::string& name) {
  return std::string(REMATLAB_EXAMPLES_DIR) + "/configs/" + name + ".json";
}

bool warns(const ImportedConfig& imported, const std::string& words) {
  return std::any_of(imported.warnings.begin(), imported.warnings.end(),
                     [&](const std::string& w) { return w.find(words) != std::string::npos; });
}

void expect_refused(const std::string& text, const std::string& words) {
  try {
    import_hf_config_text(text, "config.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const InvalidInput& error) {
    EXPECT_EQ(error.field(), "--model-config");
    EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
  }
}

TEST(HfConfig, ShippedConfigurationsGiveTheirPublishedParameterCounts) {
  // Published counts (the model cards'); Qwen's include what RematLab does not model yet, which
  // the warning names to the parameter.
  struct Case {
    const char* name;
    int64_t published;
    int64_t left_out;
    const char* warning;
  };
  const Case cases[] = {
      {"llama3-8b", 8'030'261'248, 0, ""}, {"mistral-7b-v0.3", 7'248'023'552, 0, ""},
      {"gpt2", 124'439'808, 0, ""},        {"qwen2.5-7b", 7'615'616'512, 0, ""},
      {"qwen3-8b", 8'190'735'360, 0, ""},  {"mistral-7b", 7'241'732'096, 0, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const ImportedConfig imported = import_hf_config(shipped(c.name));
    EXPECT_EQ(imported.model.parameter_count() + c.left_out, c.published);
    if (c.left_out > 0) {
      EXPECT_TRUE(warns(imported, c.warning)) << ::testing::PrintToString(imported.warnings);
      EXPECT_TRUE(
          warns(imported, "not modelled: " + std::to_string(c.left_out) + " parameters left out"))
          << ::testing::PrintToString(imported.warnings);
    }
  }
  // Llama 3 8B is all modelled: not one warning. Its training length defaults to its 8192
  // positions capped at 4096.
  const ImportedConfig llama = import_hf_config(shipped("llama3-8b"));
  EXPECT_TRUE(llama.warnings.empty()) << ::testing::PrintToString(llama.warnings);
  EXPECT_EQ(llama.model.family, ModelFamily::kLlama);
  EXPECT_EQ(llama.model.key_value_heads(), 8);
  EXPECT_EQ(llama.model.rope_theta, 500000.0);
  EXPECT_FALSE(llama.model.tie_head);
  EXPECT_EQ(llama.model.seq_len, kImportedSeqLenCap);
  // GPT-2: tied head, learned positions for its 1024 tokens, and what differs from the engine
  // said.
  const ImportedConfig gpt2 = import_hf_config(shipped("gpt2"));
  EXPECT_EQ(gpt2.model.family, ModelFamily::kGpt);
  EXPECT_TRUE(gpt2.model.tie_head);
  EXPECT_EQ(gpt2.model.seq_len, 1024);
  EXPECT_TRUE(warns(gpt2, "activation_function gelu_new"));
  EXPECT_TRUE(warns(gpt2, "resid_pdrop 0.1"));
  // Qwen 2.5: q, k and v biases, and only its norm epsilon said (not a window it does not use).
  const ImportedConfig qwen = import_hf_config(shipped("qwen2.5-7b"));
  EXPECT_TRUE(qwen.model.qkv_bias);
  EXPECT_TRUE(warns(qwen, "rms_norm_eps 1e-06"));
  EXPECT_EQ(qwen.warnings.size(), 1u) << ::testing::PrintToString(qwen.warnings);
}

// Mistral 7B v0.1 attends to its 4096 latest keys; Qwen 2 to a window only with
// use_sliding_window, and then in the layers from max_window_layers on: all of them is a window
// here, some of them is none (memory over-stated rather than under-), said so.
TEST(HfConfig, ASlidingWindowIsImportedWhereEveryLayerHasIt) {
  const ImportedConfig mistral = import_hf_config(shipped("mistral-7b"));
  EXPECT_EQ(mistral.model.sliding_window, 4096);
  EXPECT_TRUE(mistral.warnings.empty()) << ::testing::PrintToString(mistral.warnings);
  EXPECT_EQ(import_hf_config(shipped("mistral-7b-v0.3")).model.sliding_window, 0);  // null
  EXPECT_EQ(import_hf_config(shipped("qwen2.5-7b")).model.sliding_window, 0);       // not used
  const std::string qwen =
      R"({"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 4,
          "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 128,
          "sliding_window": 32, "use_sliding_window": true, "max_window_layers": )";
  const ImportedConfig all = import_hf_config_text(qwen + "0}", "config.json");
  EXPECT_EQ(all.model.sliding_window, 32);
  EXPECT_TRUE(all.warnings.empty()) << ::testing::PrintToString(all.warnings);
  const ImportedConfig none = import_hf_config_text(qwen + "4}", "config.json");
  EXPECT_EQ(none.model.sliding_window, 0);
  EXPECT_TRUE(none.warnings.empty()) << ::testing::PrintToString(none.warnings);
  const ImportedConfig some = import_hf_config_text(qwen + "1}", "config.json");
  EXPECT_EQ(some.model.sliding_window, 0);
  EXPECT_TRUE(warns(some, "sliding_window 32: the model's first 1 layers (max_window_layers)"))
      << ::testing::PrintToString(some.warnings);
  expect_refused(qwen + "-1}", "\"max_window_layers\" is -1, not a whole number of at least 0");
  // Left out, max_window_layers is transformers' 28: all 4 layers attend to everything.
  std::string unsaid = qwen;
  unsaid.resize(unsaid.rfind(','));
  EXPECT_EQ(import_hf_config_text(unsaid + "}", "config.json").model.sliding_window, 0);
  const std::string mistral_text = R"({"model_type": "mistral", "hidden_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96,
      "vocab_size": 128, "sliding_window": )";
  expect_refused(mistral_text + "\"wide\"}", "\"sliding_window\" is \"wide\", not a positive");
  expect_refused(mistral_text + "0}", "\"sliding_window\" is 0, not a positive");
}

TEST(HfConfig, NothingIsDroppedSilentlyAndBadFilesAreOneLine) {
  const std::string base =
      R"("model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 128)";
  const ImportedConfig plain = import_hf_config_text("{" + base + "}", "config.json");
  EXPECT_TRUE(plain.warnings.empty()) << ::testing::PrintToString(plain.warnings);
  EXPECT_EQ(plain.model.key_value_heads(), 4);  // absent: as many as the heads
  // A field nobody models is named; windows, scaling and biases are said with their effect.
  const ImportedConfig extra =
      import_hf_config_text("{" + base +
                                R"(, "new_router_thing": 3, "rope_scaling": {"rope_type": "llama3"},
              "attention_bias": true})",
                            "config.json");
  EXPECT_TRUE(warns(extra, "new_router_thing is not modelled"));
  EXPECT_TRUE(warns(extra, "rope_scaling is not applied"));
  EXPECT_TRUE(warns(extra, "the output projection's bias is not modelled: 128 parameters"));
  EXPECT_TRUE(extra.model.qkv_bias);

  expect_refused("not json", "not valid JSON");
  expect_refused("[1, 2]", "not a JSON object");
  expect_refused(R"({"hidden_size": 64})", "no \"model_type\"");
  expect_refused(R"({"model_type": "deepseek_v3"})", "\"deepseek_v3\" is not one RematLab builds");
  expect_refused(R"({"model_type": "llama", "hidden_size": 64})", "no \"num_hidden_layers\"");
  // A head width of its own (Qwen 3's small models): q, k, v and the output projection follow.
  const ImportedConfig wide = import_hf_config_text("{" + base + R"(, "head_dim": 32})", "c");
  EXPECT_EQ(wide.model.head_dim(), 32);
  const int64_t d = 64, q = 4 * 32, blocks = 2 * (2 * d + d * 3 * q + q * d + 3 * d * 96);
  EXPECT_EQ(wide.model.parameter_count(), 2 * 128 * d + blocks + d);
  expect_refused(R"({"model_type": "gpt2", "n_embd": -1, "n_layer": 1, "n_head": 1,
                     "vocab_size": 8})",
                 "\"n_embd\" is -1");
  expect_refused("{" + base + R"(, "rope_theta": "big"})", "not a number");
  // Sizes the engine cannot build are the file's fault, said before anything divides by them.
  expect_refused(R"({"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 0, "intermediate_size": 96, "vocab_size": 128})",
                 "\"num_attention_heads\" is 0, not a positive whole number");
  expect_refused(R"({"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 3, "intermediate_size": 96, "vocab_size": 128})",
                 "3 heads do not divide");
  expect_refused(R"({"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 2097152, "head_dim": 2, "intermediate_size": 96,
                     "vocab_size": 128})",
                 "--heads");
  // Paths that are no configuration file: one line each, none read.
  for (const auto& [path, words] :
       std::vector<std::pair<std::string, std::string>>{{"/nonexistent/config.json", "cannot read"},
                                                        {"", "names no file"},
                                                        {"/dev/zero", "not a regular file"},
                                                        {"/tmp", "not a regular file"}}) {
    try {
      import_hf_config(path);
      ADD_FAILURE() << path;
    } catch (const InvalidInput& error) {
      EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
    }
  }
}

TEST(HfConfig, QkvBiasesAreRecordedWhereSetAndReadBack) {
  RunConfig config;
  config.model = import_hf_config(shipped("qwen2.5-7b")).model;
  const nlohmann::json recorded = to_json(config);
  EXPECT_EQ(recorded.at("qkv_bias"), true);
  EXPECT_TRUE(run_config_from_record(recorded).model.qkv_bias);
  // Every other model's record is as it was before the field existed.
  config.model = model_preset("llama3-8b");
  EXPECT_FALSE(to_json(config).contains("qkv_bias"));
  // The qwen2.5-7b preset without its biases reads back without them.
  config.preset = "qwen2.5-7b";
  config.model = model_preset("qwen2.5-7b");
  config.model.qkv_bias = false;
  EXPECT_FALSE(run_config_from_record(to_json(config)).model.qkv_bias);
  // A run of an imported configuration keeps its label, and its shape, when read back.
  config.preset = "qwen2 from config.json";
  config.model = import_hf_config(shipped("qwen2.5-7b")).model;
  std::vector<std::string> unread;
  const RunConfig read = run_config_from_record(to_json(config), &unread);
  EXPECT_TRUE(unread.empty()) << ::testing::PrintToString(unread);  // a label is read, as one
  EXPECT_EQ(read.preset, "qwen2 from config.json");
  EXPECT_EQ(read.model.parameter_count(), 7'615'616'512);
  // GPT has every bias already: the field is refused there.
  config.model = model_preset("small");
  config.model.qkv_bias = true;
  EXPECT_THROW(validate(config.model), InvalidInput);
  // Qwen 3's q/k norms likewise: recorded, read back, written only where set.
  config.preset = "qwen3 from config.json";
  config.model = import_hf_config(shipped("qwen3-8b")).model;
  EXPECT_TRUE(config.model.qk_norm);
  EXPECT_EQ(to_json(config).at("qk_norm"), true);
  EXPECT_EQ(run_config_from_record(to_json(config)).model.parameter_count(), 8'190'735'360);
  config.preset = "llama3-8b";
  config.model = model_preset("llama3-8b");
  EXPECT_FALSE(to_json(config).contains("qk_norm"));
  config.preset = "qwen3-8b";
  config.model = model_preset("qwen3-8b");
  config.model.qk_norm = false;
  EXPECT_FALSE(run_config_from_record(to_json(config)).model.qk_norm);
}

TEST(HfConfigCli, QkNormsAreRefusedWhereTheyCannotRun) {
  for (const auto& [command, flag] : std::vector<std::pair<std::string, std::string>>{
           {"run --arch gpt --qk-norm true --steps 1", "--qk-norm"},
           {"run --preset llama-tiny --qk-norm true --nproc 2 --tp 2 --steps 1", "--tp"},
           {"run --preset qwen3-8b --layers 1 --d-model 64 --heads 4 --kv-heads 2 --mlp-hidden 64 "
            "--vocab 256 --seq-len 32 --nproc 2 --tp 2 --steps 1",
            "--tp"}}) {
    const auto refused = testing::cli(command);
    EXPECT_EQ(refused.exit_code, 2) << command << ": " << refused.err;
    EXPECT_EQ(testing::count_lines(refused.err), 1) << refused.err;
    EXPECT_NE(refused.err.find(flag), std::string::npos) << refused.err;
  }
}

TEST(HfConfigCli, EveryCommandTakesAConfigurationAndItsPoliciesMatchNone) {
  testing::ScratchDir dir("hf-config");
  // Small shapes of both families as a user's files would give them.
  const std::string llama = dir.file("qwen2-small.json");
  std::ofstream(llama) << R"({"model_type": "qwen2", "hidden_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "intermediate_size": 96, "vocab_size": 128, "max_position_embeddings": 32,
      "tie_word_embeddings": true})";
  const std::string gpt = dir.file("gpt2-small.json");
  std::ofstream(gpt) << R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 2,
      "n_positions": 16, "vocab_size": 64, "activation_function": "gelu"})";
  const std::string wide = dir.file("qwen3-wide-heads.json");
  std::ofstream(wide) << R"({"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
      "intermediate_size": 96, "vocab_size": 128, "max_position_embeddings": 32})";
  for (const std::string& file : {llama, gpt, wide}) {
    for (const char* policy : {"every:1", "sublayer:1,2", "selective"}) {
      const auto checked = testing::cli("check --model-config " + file + " --checkpoint " + policy +
                                        " --batch 2 --threads 1 --json");
      EXPECT_EQ(checked.exit_code, 0) << file << " " << policy << ": " << checked.err;
      EXPECT_NE(checked.err.find("identical"), std::string::npos) << checked.err;
    }
  }
  // Qwen 2's q, k and v biases are trained: nothing to warn about.
  const auto run = testing::cli("run --model-config " + llama + " --steps 2 --threads 1 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err.find("warning"), std::string::npos) << run.err;
  const nlohmann::json json = testing::last_line_json(run.out);
  EXPECT_EQ(json.at("layers").get<int64_t>(), 2);
  EXPECT_EQ(json.at("seq_len").get<int64_t>(), 32);
  // Flags refine the file's shape.
  const auto estimate =
      testing::cli("estimate --model-config " + shipped("llama3-8b") + " --seq-len 2048 --json");
  ASSERT_EQ(estimate.exit_code, 0) << estimate.err;
  const nlohmann::json estimated = testing::last_line_json(estimate.out);
  EXPECT_EQ(estimated.at("params").get<int64_t>(), 8'030'261'248);
  EXPECT_EQ(estimated.at("seq_len").get<int64_t>(), 2048);
  const auto qwen = testing::cli("estimate --model-config " + shipped("qwen2.5-7b") + " --json");
  ASSERT_EQ(qwen.exit_code, 0) << qwen.err;
  EXPECT_EQ(testing::last_line_json(qwen.out).at("params").get<int64_t>(), 7'615'616'512);
  const auto layout = testing::cli("layout --model-config " + shipped("llama3-8b") +
                                   " --gpu h100-sxm --gpus 8 --global-batch 64 --json");
  ASSERT_EQ(layout.exit_code, 0) << layout.err;
  EXPECT_NE(testing::last_line_json(layout.out).at("model").get<std::string>().find("llama from"),
            std::string::npos);
  // Bad input: one line naming the flag, exit 2.
  for (const std::string& bad : std::vector<std::string>{
           "run --model-config /nonexistent.json", "run --preset small --model-config " + llama,
           "run --model-config ''", "estimate --model-config /dev/zero",
           "estimate --model-config " + dir.file("missing.json")}) {
    const auto refused = testing::cli(bad);
    EXPECT_EQ(refused.exit_code, 2) << bad << ": " << refused.err;
    EXPECT_EQ(testing::count_lines(refused.err), 1) << refused.err;
    EXPECT_NE(refused.err.find("--model-config"), std::string::npos) << refused.err;
  }
}

// A sweep over users' models: each point trains its file's shape, is recorded under
// "qwen2 from PATH", and what the files do not model is said once, on stderr.
TEST(HfConfigCli, ASweepTrainsTheModelsItsConfigJsonFilesName) {
  testing::ScratchDir dir("hf-config-sweep");
  std::ofstream(dir.file("qwen.json")) << R"({"model_type": "qwen2", "hidden_size": 32,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "intermediate_size": 48, "vocab_size": 64, "max_position_embeddings": 16,
      "hidden_act": "gelu"})";
  std::ofstream(dir.file("gpt.json")) << R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 2,
      "n_head": 2, "n_positions": 16, "vocab_size": 64, "activation_function": "gelu"})";
  std::ofstream(dir.file("spec.json")) << R"({"name": "two models",
      "base": {"steps": 1, "batch": 2, "threads": 1},
      "axes": {"model_config": ["qwen.json", "gpt.json"]}})";
  const std::string db = dir.file("runs.db");
  const auto swept = testing::cli("sweep --spec " + dir.file("spec.json") + " --db " + db);
  ASSERT_EQ(swept.exit_code, 0) << swept.err;
  // Said once (GPT-2's file asks for the exact GELU: nothing to say of it).
  const auto first = swept.err.find("warning: ");
  EXPECT_EQ(swept.err.find("warning: spec: axes.model_config[0]: hidden_act gelu"), first)
      << swept.err;
  EXPECT_EQ(swept.err.find("warning: ", first + 1), std::string::npos) << swept.err;
  const auto runs = testing::cli("runs --db " + db + " --json");
  ASSERT_EQ(runs.exit_code, 0) << runs.err;
  const nlohmann::json recorded = testing::last_line_json(runs.out);
  std::vector<std::string> models;
  for (const auto& run : recorded.at("runs")) {
    EXPECT_EQ(run.at("status").get<std::string>(), "ok");
    models.push_back(run.at("config").at("preset").get<std::string>() + " " +
                     run.at("config").at("arch").get<std::string>());
  }
  std::sort(models.begin(), models.end());
  EXPECT_EQ(models, (std::vector<std::string>{"gpt2 from " + dir.file("gpt.json") + " gpt",
                                              "qwen2 from " + dir.file("qwen.json") + " llama"}));
}

}  // namespace
}  // namespace rematlab
