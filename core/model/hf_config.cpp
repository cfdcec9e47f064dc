#include "model/hf_config.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>

#include "common/errors.h"
#include "common/json_text.h"
#include "common/posix_files.h"

namespace rematlab {
namespace {

constexpr const char* kFlag = "--model-config";
constexpr double kEngineNormEps = 1e-5;  // core/model/norm.cpp

// Fields that do not change what is trained, nor its memory or FLOPs: token ids, how the
// weights were stored, which library wrote the file, generation settings.
const std::set<std::string>& inert_fields() {
  static const std::set<std::string> kInert = {"_name_or_path",
                                               "architectures",
                                               "auto_map",
                                               "bos_token_id",
                                               "eos_token_id",
                                               "pad_token_id",
                                               "torch_dtype",
                                               "dtype",
                                               "transformers_version",
                                               "use_cache",
                                               "initializer_range",
                                               "pretraining_tp",
                                               "tokenizer_class",
                                               "model_type",
                                               "id2label",
                                               "label2id",
                                               "task_specific_params",
                                               "bad_words_ids",
                                               "decoder_start_token_id",
                                               "summary_activation",
                                               "summary_first_dropout",
                                               "summary_proj_to_labels",
                                               "summary_type",
                                               "summary_use_proj",
                                               "max_window_layers",
                                               "use_sliding_window",
                                               "n_ctx"};
  return kInert;
}

// Reads the configuration's fields, recording which were looked at.
class Fields {
 public:
  Fields(const nlohmann::json& json, std::string name) : json_(json), name_(std::move(name)) {}

  bool has(const std::string& key) {
    read_.insert(key);
    return json_.contains(key) && !json_.at(key).is_null();
  }
  int64_t size(const std::string& key) {
    if (!has(key)) throw InvalidInput(kFlag, name_ + ": no \"" + key + "\"");
    return size_value(key);
  }
  int64_t size_or(const std::string& key, int64_t otherwise) {
    return has(key) ? size_value(key) : otherwise;
  }
  // A count that may be 0.
  int64_t count_or(const std::string& key, int64_t otherwise) {
    return has(key) ? size_value(key, 0) : otherwise;
  }
  double number_or(const std::string& key, double otherwise) {
    if (!has(key)) return otherwise;
    const nlohmann::json& value = json_.at(key);
    if (!value.is_number() || !std::isfinite(value.get<double>())) {
      throw InvalidInput(kFlag,
                         name_ + ": \"" + key + "\" is " + brief_json(value) + ", not a number");
    }
    return value.get<double>();
  }
  bool flag_or(const std::string& key, bool otherwise) {
    if (!has(key)) return otherwise;
    const nlohmann::json& value = json_.at(key);
    if (!value.is_boolean()) {
      throw InvalidInput(
          kFlag, name_ + ": \"" + key + "\" is " + brief_json(value) + ", not true or false");
    }
    return value.get<bool>();
  }
  std::string text_or(const std::string& key, const std::string& otherwise) {
    if (!has(key)) return otherwise;
    const nlohmann::json& value = json_.at(key);
    return value.is_string() ? value.get<std::string>() : brief_json(value);
  }
  // Fields no one read, in the file's order: each is named in a warning.
  std::vector<std::string> unread() const {
    std::vector<std::string> keys;
    for (const auto& item : json_.items()) {
      if (!read_.count(item.key()) && !inert_fields().count(item.key())) {
        keys.push_back(item.key());
      }
    }
    return keys;
  }

 private:
  int64_t size_value(const std::string& key, int64_t least = 1) const {
    const nlohmann::json& value = json_.at(key);
    // Positive (or at least `least`), and small enough that no product of two sizes overflows
    // (the model's own limits, checked once the whole file is read, are tighter).
    constexpr int64_t kLargest = int64_t{1} << 31;
    if (!value.is_number_integer() || value.get<int64_t>() < least ||
        value.get<int64_t>() > kLargest) {
      throw InvalidInput(
          kFlag, name_ + ": \"" + key + "\" is " + brief_json(value) +
                     (least == 1 ? ", not a positive whole number"
                                 : ", not a whole number of at least " + std::to_string(least)));
    }
    return value.get<int64_t>();
  }

  const nlohmann::json& json_;
  std::string name_;
  std::set<std::string> read_;
};

std::string format_number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Mistral's window applies when given. Qwen 2's only with use_sliding_window, and then to the
// layers from max_window_layers on (transformers' reading): all of them or none is a window
// here; a model that mixes them is imported without one, its memory over- rather than
// under-stated, and said so.
void import_sliding_window(Fields& fields, ImportedConfig& imported) {
  const bool given = fields.has("sliding_window");
  const bool mistral_like = imported.model_type == "mistral" || imported.model_type == "mixtral";
  const bool used = mistral_like || fields.flag_or("use_sliding_window", false);
  if (!given || !used) return;
  // Qwen's layers below max_window_layers attend to everything (transformers' default 28 when
  // the file leaves it out); Mistral has no such field.
  const int64_t full_layers = mistral_like ? 0 : fields.count_or("max_window_layers", 28);
  if (full_layers >= imported.model.layers) return;
  const int64_t window = fields.size("sliding_window");
  if (full_layers > 0) {
    imported.warnings.push_back(
        "sliding_window " + std::to_string(window) + ": the model's first " +
        std::to_string(full_layers) +
        " layers (max_window_layers) attend to the whole sequence and the rest to a window; "
        "here every layer attends to the whole sequence (memory and FLOPs over-stated)");
    return;
  }
  imported.model.sliding_window = window;
}

void import_llama_like(Fields& fields, ImportedConfig& imported, const std::string& name) {
  ModelConfig& model = imported.model;
  std::vector<std::string>& warnings = imported.warnings;
  const std::string& type = imported.model_type;
  model.family = ModelFamily::kLlama;
  model.d_model = fields.size("hidden_size");
  model.layers = fields.size("num_hidden_layers");
  model.heads = fields.size("num_attention_heads");
  model.kv_heads = fields.size_or("num_key_value_heads", model.heads);
  model.mlp_hidden = fields.size("intermediate_size");
  model.vocab = fields.size("vocab_size");
  model.rope_theta = fields.number_or("rope_theta", 10000.0);
  model.tie_head = fields.flag_or("tie_word_embeddings", false);
  model.seq_len = std::min(fields.size_or("max_position_embeddings", 2048), kImportedSeqLenCap);
  // Mistral and Qwen 3 say their head width; it need not be hidden_size / heads.
  const int64_t head_dim = fields.size_or("head_dim", 0);
  if (model.heads > 0 && head_dim * model.heads != model.d_model) model.head_width = head_dim;
  const std::string act = fields.text_or("hidden_act", "silu");
  if (act != "silu") {
    warnings.push_back("hidden_act " + act + ": the MLP is SwiGLU with silu, as Llama's");
  }
  const double eps = fields.number_or("rms_norm_eps", kEngineNormEps);
  if (eps != kEngineNormEps) {
    warnings.push_back("rms_norm_eps " + format_number(eps) +
                       ": the norms use 1e-05 (values differ slightly; memory and FLOPs alike)");
  }
  // Qwen 2 has biases on q, k and v whatever the file says; Llama's attention_bias puts one on
  // the output projection too, which is not modelled.
  const bool attention_bias = fields.flag_or("attention_bias", false);
  model.qkv_bias = type == "qwen2" || type == "qwen2_moe" || attention_bias;
  if (attention_bias) {
    warnings.push_back("attention_bias: the output projection's bias is not modelled: " +
                       std::to_string(model.layers * model.d_model) + " parameters left out");
  }
  if (fields.flag_or("mlp_bias", false)) {
    warnings.push_back("mlp_bias: the MLP's biases are not modelled");
  }
  // Its heads' q and k are normalised, whatever the file says.
  model.qk_norm = type == "qwen3" || type == "qwen3_moe";
  import_sliding_window(fields, imported);
  if (fields.has("rope_scaling")) {
    warnings.push_back(
        "rope_scaling is not applied: plain rotary frequencies (memory and FLOPs "
        "alike)");
  }
  if (fields.number_or("attention_dropout", 0.0) != 0.0) {
    warnings.push_back("attention_dropout: dropout is set with --dropout");
  }
}

// Mixtral's, Qwen 2 MoE's and Qwen 3 MoE's experts. transformers adds the balance loss only when
// output_router_logits is set (their published files leave it off): so here, said in a warning.
void import_experts(Fields& fields, ImportedConfig& imported) {
  const std::string& type = imported.model_type;
  MoeOptions& moe = imported.model.moe;
  const bool mixtral = type == "mixtral";
  moe.experts = fields.size(mixtral ? "num_local_experts" : "num_experts");
  moe.experts_per_token = fields.size("num_experts_per_tok");
  if (!mixtral) {
    moe.expert_hidden = fields.size("moe_intermediate_size");
    moe.normalise_weights = fields.flag_or("norm_topk_prob", false);
  }
  if (type == "qwen2_moe")
    moe.shared_expert_hidden = fields.count_or("shared_expert_intermediate_size", 0);
  const bool given = fields.has("router_aux_loss_coef");
  const double coefficient = fields.number_or("router_aux_loss_coef", 0.001);
  if (fields.flag_or("output_router_logits", false)) {
    moe.balance_coefficient = coefficient;
  } else if (given) {
    imported.warnings.push_back(
        "router_aux_loss_coef " + format_number(coefficient) +
        " is not applied: output_router_logits is off, and transformers then trains without the "
        "balance loss (--balance-coefficient sets it)");
  }
  if (fields.number_or("router_jitter_noise", 0.0) != 0.0) {
    imported.warnings.push_back("router_jitter_noise: the router's logits are used without noise");
  }
  if (!mixtral) {
    const int64_t step = fields.count_or("decoder_sparse_step", 1);
    const bool dense_layers =
        fields.has("mlp_only_layers") && fields.text_or("mlp_only_layers", "[]") != "[]";
    if (step != 1 || dense_layers) {
      imported.warnings.push_back(
          "decoder_sparse_step / mlp_only_layers: some of the model's layers have a dense MLP; "
          "here every layer is a mixture of experts");
    }
  }
}

void import_gpt2(Fields& fields, ImportedConfig& imported) {
  ModelConfig& model = imported.model;
  model.family = ModelFamily::kGpt;
  model.d_model = fields.size("n_embd");
  model.layers = fields.size("n_layer");
  model.heads = fields.size("n_head");
  model.kv_heads = 0;
  model.mlp_hidden = fields.size_or("n_inner", 0);
  model.vocab = fields.size("vocab_size");
  model.tie_head = fields.flag_or("tie_word_embeddings", true);
  // Learned positions: the table has n_positions rows, which the run trains at.
  model.seq_len = std::min(fields.size_or("n_positions", 1024), kImportedSeqLenCap);
  const std::string act = fields.text_or("activation_function", "gelu_new");
  if (act != "gelu") {
    imported.warnings.push_back("activation_function " + act +
                                ": the MLP's GELU is the exact one (values differ by under "
                                "1e-3; memory and FLOPs alike)");
  }
  const double eps = fields.number_or("layer_norm_epsilon", kEngineNormEps);
  if (eps != kEngineNormEps) {
    imported.warnings.push_back("layer_norm_epsilon " + format_number(eps) +
                                ": the norms use 1e-05");
  }
  const double resid = fields.number_or("resid_pdrop", 0.0);
  const double embd = fields.number_or("embd_pdrop", resid);
  const double attn = fields.number_or("attn_pdrop", resid);
  if (resid != 0.0 || embd != 0.0 || attn != 0.0) {
    imported.warnings.push_back("dropout (resid_pdrop " + format_number(resid) + ", embd_pdrop " +
                                format_number(embd) + ", attn_pdrop " + format_number(attn) +
                                ") is not imported: --dropout sets it");
  }
  for (const char* inert :
       {"scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"}) {
    fields.has(inert);  // how the scores are computed, not what is kept
  }
}

}  // namespace

ImportedConfig import_hf_config_text(const std::string& text, const std::string& name) {
  nlohmann::json json;
  try {
    json = parse_json(text);
  } catch (const std::invalid_argument& error) {
    throw InvalidInput(kFlag, name + " is not valid JSON: " + error.what());
  }
  if (!json.is_object()) throw InvalidInput(kFlag, name + " is not a JSON object");
  if (!json.contains("model_type") || !json.at("model_type").is_string()) {
    throw InvalidInput(kFlag, name + " has no \"model_type\": not a Hugging Face configuration");
  }
  ImportedConfig imported;
  imported.model_type = json.at("model_type").get<std::string>();
  Fields fields(json, name);
  const std::string& type = imported.model_type;
  if (type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3") {
    import_llama_like(fields, imported, name);
  } else if (type == "mixtral" || type == "qwen2_moe" || type == "qwen3_moe") {
    import_llama_like(fields, imported, name);
    import_experts(fields, imported);
  } else if (type == "gpt2") {
    import_gpt2(fields, imported);
  } else {
    throw InvalidInput(kFlag, name + ": model_type \"" + type +
                                  "\" is not one RematLab builds (llama, mistral, qwen2, qwen3, "
                                  "mixtral, qwen2_moe, qwen3_moe, gpt2)");
  }
  for (const std::string& key : fields.unread()) {
    imported.warnings.push_back(key + " is not modelled");
  }
  // A shape the engine cannot build is the file's fault: said as such, in one line, before
  // anything derives a figure from it.
  try {
    validate(imported.model);
  } catch (const InvalidInput& error) {
    throw InvalidInput(kFlag, name + ": " + error.reason() + " (" + error.field() + ")");
  }
  return imported;
}

ImportedConfig import_hf_config(const std::string& path) {
  if (path.empty()) throw InvalidInput(kFlag, "names no file");
  // A config.json is a few KiB: a device, a pipe or a directory would block or read forever.
  const files::SmallFile file = files::read_small_file(path, int64_t{1} << 20);
  if (!file.error.empty()) throw InvalidInput(kFlag, "cannot read '" + path + "': " + file.error);
  return import_hf_config_text(file.text, "'" + path + "'");
}

std::string imported_model_label(const ImportedConfig& imported, const std::string& path) {
  return imported.model_type + " from " + path;
}

}  // namespace rematlab
