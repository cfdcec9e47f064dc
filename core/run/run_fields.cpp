#include "run/run_fields.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <type_traits>

#include "checkpoint/checkpoint_policy.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "common/json_text.h"
#include "common/wording.h"
#include "model/hf_config.h"
#include "run/pipeline_config.h"

namespace rematlab {
namespace {

using Setter = std::function<void(RunConfig&, const nlohmann::json&, const std::string& field)>;

// Read before every other field, in this order: each may reset what the next one sets.
constexpr const char* kFirstFields[] = {"preset", "model_config", "arch", "finetune", "experts"};

// A LoRA setting on a run that trains every weight would be silently ignored: refused.
void require_lora(const RunConfig& config, const std::string& field) {
  if (!config.model.lora.enabled()) {
    throw InvalidInput(field, "goes with " + setting("finetune", "lora"));
  }
}

[[noreturn]] void wrong_type(const std::string& field, const char* expected,
                             const nlohmann::json& value) {
  throw InvalidInput(field, std::string("must be ") + expected + ", got " + brief_json(value));
}

int64_t as_integer(const nlohmann::json& value, const std::string& field) {
  if (!value.is_number_integer()) wrong_type(field, "an integer", value);
  if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{INT64_MAX}) {
    throw InvalidInput(field, brief_json(value) + " is out of range");
  }
  return value.get<int64_t>();
}
double as_number(const nlohmann::json& value, const std::string& field) {
  if (!value.is_number()) wrong_type(field, "a number", value);
  return value.get<double>();
}
std::string as_text(const nlohmann::json& value, const std::string& field) {
  if (!value.is_string()) wrong_type(field, "a string", value);
  return value.get<std::string>();
}

// Narrowing to the member's type must not wrap (threads is an int).
template <typename T>
T narrow(int64_t value, const std::string& field) {
  if (value < std::numeric_limits<T>::min() || value > std::numeric_limits<T>::max()) {
    throw InvalidInput(field, std::to_string(value) + " is out of range");
  }
  return static_cast<T>(value);
}

template <typename T>
Setter integer(T RunConfig::*member) {
  return [member](RunConfig& c, const nlohmann::json& v, const std::string& f) {
    c.*member = narrow<T>(as_integer(v, f), f);
  };
}
template <typename T>
Setter model_integer(T ModelConfig::*member) {
  return [member](RunConfig& c, const nlohmann::json& v, const std::string& f) {
    c.model.*member = narrow<T>(as_integer(v, f), f);
  };
}
template <typename T>
Setter moe_field(T MoeOptions::*member) {
  return [member](RunConfig& c, const nlohmann::json& v, const std::string& f) {
    if constexpr (std::is_same_v<T, double>) {
      c.model.moe.*member = as_number(v, f);
    } else {
      c.model.moe.*member = narrow<T>(as_integer(v, f), f);
    }
  };
}
Setter number(double RunConfig::*member) {
  return [member](RunConfig& c, const nlohmann::json& v, const std::string& f) {
    c.*member = as_number(v, f);
  };
}
Setter flag(bool RunConfig::*member) {
  return [member](RunConfig& c, const nlohmann::json& v, const std::string& f) {
    if (!v.is_boolean()) wrong_type(f, "true or false", v);
    c.*member = v.get<bool>();
  };
}
Setter text(std::string RunConfig::*member) {
  return [member](RunConfig& c, const nlohmann::json& v, const std::string& f) {
    c.*member = as_text(v, f);
  };
}

// How each run field is set from its JSON value (a data table: one entry per field).
const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      {"preset",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         const std::string name = as_text(v, f);
         try {
           c.model = model_preset(name);
         } catch (const InvalidInput& error) {
           throw InvalidInput(f, error.reason_words());
         }
         c.preset = name;
       }},
      // A Hugging Face config.json as the model's shape, as --model-config reads it (its
      // warnings are the spec's: sweep/sweep_spec.h); recorded as "qwen2 from PATH".
      {"model_config",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         const std::string path = as_text(v, f);
         try {
           const ImportedConfig imported = import_hf_config(path);
           c.model = imported.model;
           c.preset = imported_model_label(imported, path);
         } catch (const InvalidInput& error) {
           throw InvalidInput(f, error.reason_words());
         }
       }},
      {"arch",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         try {
           c.model.switch_family(parse_family(as_text(v, f)));
         } catch (const InvalidInput& error) {
           throw InvalidInput(f, error.reason_words());
         }
       }},
      {"kv_heads", model_integer(&ModelConfig::kv_heads)},
      {"head_dim", model_integer(&ModelConfig::head_width)},
      {"sliding_window", model_integer(&ModelConfig::sliding_window)},
      {"mlp_hidden", model_integer(&ModelConfig::mlp_hidden)},
      // 0: a dense MLP, whatever the preset's experts were (a record of one made dense).
      {"experts",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         const int64_t experts = as_integer(v, f);
         if (experts == 0) c.model.moe = MoeOptions{};
         c.model.moe.experts = experts;
         // Experts given to a dense model: two a token unless told, as --experts does.
         if (experts > 0 && c.model.moe.experts_per_token == 0) {
           c.model.moe.experts_per_token = std::min<int64_t>(2, experts);
         }
       }},
      {"experts_per_token", moe_field(&MoeOptions::experts_per_token)},
      {"expert_hidden", moe_field(&MoeOptions::expert_hidden)},
      {"shared_expert_hidden", moe_field(&MoeOptions::shared_expert_hidden)},
      {"balance_coefficient", moe_field(&MoeOptions::balance_coefficient)},
      {"capacity_factor", moe_field(&MoeOptions::capacity_factor)},
      {"expert_weights",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         try {
           c.model.moe.normalise_weights = parse_expert_weights(as_text(v, f));
         } catch (const InvalidInput& error) {
           throw InvalidInput(f, error.reason_words());
         }
       }},
      {"tie_head",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         if (!v.is_boolean()) wrong_type(f, "true or false", v);
         c.model.tie_head = v.get<bool>();
       }},
      {"qkv_bias",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         if (!v.is_boolean()) wrong_type(f, "true or false", v);
         c.model.qkv_bias = v.get<bool>();
       }},
      {"qk_norm",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         if (!v.is_boolean()) wrong_type(f, "true or false", v);
         c.model.qk_norm = v.get<bool>();
       }},
      // Fine-tuning: "finetune" (read before the fields below, as the preset is) gives LoRA's
      // defaults, which the lora_ fields then replace.
      {"finetune",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         const std::string mode = as_text(v, f);
         if (mode == "full") {
           c.model.lora = LoraOptions{};
         } else if (mode == "lora") {
           c.model.lora = default_lora_options(c.model.family);
         } else {
           throw InvalidInput(f, "unknown fine-tuning '" + mode + "' (use full or lora)");
         }
       }},
      {"lora_rank",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         require_lora(c, f);
         c.model.lora.rank = as_integer(v, f);
         if (c.model.lora.rank < 1) throw InvalidInput(f, "must be at least 1");
       }},
      {"base_precision",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         require_lora(c, f);
         try {
           c.model.lora.base = parse_base_precision(as_text(v, f));
         } catch (const InvalidInput& error) {
           throw InvalidInput(f, error.reason_words());
         }
       }},
      {"lora_alpha",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         require_lora(c, f);
         const double alpha = as_number(v, f);
         if (!(std::isfinite(alpha) && alpha > 0.0)) {
           throw InvalidInput(f, "must be a positive number such as 32");
         }
         c.model.lora.alpha = alpha;
       }},
      {"lora_targets",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         require_lora(c, f);
         const std::string targets = as_text(v, f);
         try {
           c.model.lora.targets = targets == "all" ? default_lora_options(c.model.family).targets
                                                   : parse_lora_targets(targets);
         } catch (const InvalidInput& error) {
           throw InvalidInput(f, error.reason_words());
         }
       }},
      {"rope_theta", [](RunConfig& c, const nlohmann::json& v,
                        const std::string& f) { c.model.rope_theta = as_number(v, f); }},
      {"loss_chunks",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         if (v.is_string()) {
           try {
             c.model.loss_chunks = parse_loss_chunks(v.get<std::string>());
           } catch (const InvalidInput& error) {
             throw InvalidInput(f, error.reason_words());
           }
         } else {
           c.model.loss_chunks = narrow<int64_t>(as_integer(v, f), f);
         }
       }},
      {"layers", model_integer(&ModelConfig::layers)},
      {"d_model", model_integer(&ModelConfig::d_model)},
      {"heads", model_integer(&ModelConfig::heads)},
      {"seq_len", model_integer(&ModelConfig::seq_len)},
      {"vocab", model_integer(&ModelConfig::vocab)},
      {"dropout", [](RunConfig& c, const nlohmann::json& v,
                     const std::string& f) { c.model.dropout = as_number(v, f); }},
      {"attention",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         try {
           c.model.attention = parse_attention(as_text(v, f));
         } catch (const InvalidInput& error) {
           throw InvalidInput(f, error.reason_words());
         }
       }},
      {"batch", integer(&RunConfig::batch)},
      {"accum", integer(&RunConfig::accum)},
      {"steps", integer(&RunConfig::steps)},
      {"warmup_steps", integer(&RunConfig::warmup_steps)},
      {"lr", number(&RunConfig::lr)},
      {"weight_decay", number(&RunConfig::weight_decay)},
      {"grad_clip", number(&RunConfig::grad_clip)},
      {"seed",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         // The seed is unsigned (--seed takes any 64-bit value): one past INT64_MAX must read
         // back from the record it wrote, not show as unread.
         if (v.is_number_unsigned()) {
           c.seed = v.get<uint64_t>();
           return;
         }
         const int64_t seed = as_integer(v, f);
         if (seed < 0) throw InvalidInput(f, "must not be negative");
         c.seed = static_cast<uint64_t>(seed);
       }},
      {"threads", integer(&RunConfig::threads)},
      {"precision",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         try {
           c.precision = parse_precision(as_text(v, f));
         } catch (const InvalidInput& error) {
           throw InvalidInput(f, error.reason_words());
         }
       }},
      {"device", text(&RunConfig::device)},
      // POLICY or POLICY+OFFLOAD ("every:1+disk"): lets one axis list the article's strategies,
      // which are not a full grid of policies × offload modes.
      {"checkpoint",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         const PolicyAndOffload parts = split_policy_and_offload(as_text(v, f));
         c.checkpoint = CheckpointPolicy::canonical_text(parts.checkpoint);
         if (parts.offload) c.offload = *parts.offload;
       }},
      {"offload", text(&RunConfig::offload)},
      {"data", text(&RunConfig::data)},
      {"budget",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         // A number is bytes, checked as every integer field is: a float or a value past
         // INT64_MAX is refused, never converted (get<int64_t> wrapped 2^64-1 to -1).
         const int64_t bytes = v.is_number() ? as_integer(v, f) : parse_byte_size(as_text(v, f), f);
         if (bytes < 0) throw InvalidInput(f, "must be a positive size (0: no budget)");
         c.budget_bytes = bytes;
       }},
      {"budget_bytes", integer(&RunConfig::budget_bytes)},
      {"timeline", flag(&RunConfig::timeline)},
      {"loss_scale", number(&RunConfig::loss_scale)},
      {"loss_scale_growth_interval", integer(&RunConfig::loss_scale_growth_interval)},
      {"tf32", flag(&RunConfig::tf32)},
      {"deterministic", flag(&RunConfig::deterministic)},
      {"world_size", integer(&RunConfig::world_size)},
      {"shard", text(&RunConfig::shard)},
      {"bucket_bytes", integer(&RunConfig::bucket_bytes)},
      {"tp", integer(&RunConfig::tp)},
      {"sequence_parallel", flag(&RunConfig::sequence_parallel)},
      {"pp", integer(&RunConfig::pp)},
      {"ep", integer(&RunConfig::ep)},
      {"virtual_stages", integer(&RunConfig::virtual_stages)},
      // "3,5" as --pp-split takes it, or [3, 5] as the record keeps it.
      {"pp_split",
       [](RunConfig& c, const nlohmann::json& v, const std::string& f) {
         try {
           if (v.is_array()) {
             // Whole or not at all: a record's list with one bad entry is unread, not cut short.
             std::vector<int64_t> split;
             for (const nlohmann::json& blocks : v) split.push_back(as_integer(blocks, f));
             c.pp_split = std::move(split);
             c.pp_split_balanced = false;
           } else if (!v.is_string()) {
             throw InvalidInput(f, "must be block counts, as a list or as text (\"3,5\"), got " +
                                       brief_json(v));
           } else {
             set_pp_split(c, as_text(v, f));
           }
         } catch (const InvalidInput& error) {
           throw InvalidInput(f, error.reason_words());
         }
       }},
  };
  return table;
}

}  // namespace

bool is_run_field(const std::string& key) { return setters().count(key) > 0; }

bool is_first_field(const std::string& key) {
  return std::any_of(std::begin(kFirstFields), std::end(kFirstFields),
                     [&](const char* first) { return key == first; });
}

void apply_run_field(RunConfig& config, const std::string& key, const nlohmann::json& value,
                     const std::string& where) {
  const auto setter = setters().find(key);
  if (setter == setters().end()) throw InvalidInput(where, "unknown run field '" + key + "'");
  setter->second(config, value, where);
}

RunConfig run_config_from_fields(const nlohmann::ordered_json& fields, const std::string& where) {
  RunConfig config;
  if (fields.is_null()) return config;  // nothing given: the defaults
  if (!fields.is_object()) throw InvalidInput(where, "must be an object of run fields");
  auto field_name = [&](const std::string& key) { return where + "." + key; };
  // The preset or config.json first, then the family (which resets what only one family has),
  // then the fine-tuning (whose defaults are the family's), then the fields given explicitly,
  // whatever their order in the text.
  if (fields.contains("preset") && fields.contains("model_config")) {
    throw InvalidInput(field_name("model_config"),
                       "names the model, as preset does: give one of them");
  }
  for (const char* first : kFirstFields) {
    if (fields.contains(first))
      apply_run_field(config, first, nlohmann::json(fields.at(first)), field_name(first));
  }
  for (const auto& item : fields.items()) {
    if (is_first_field(item.key())) continue;
    apply_run_field(config, item.key(), nlohmann::json(item.value()), field_name(item.key()));
  }
  return config;
}

RunConfig run_config_from_record(const nlohmann::json& json, std::vector<std::string>* unread) {
  RunConfig config;
  if (!json.is_object()) {  // said, never passed off as a run that trained with the defaults
    if (unread) unread->push_back(kUnreadWholeConfig);
    return config;
  }
  auto apply = [&](const std::string& key, const nlohmann::json& value) {
    // A record holds the shape itself; a file it names (a hand edit) is not read.
    if (key == "model_config") {
      if (unread) unread->push_back(key);
      return;
    }
    try {
      apply_run_field(config, key, value, "runs.config." + key);
    } catch (const InvalidInput&) {
      // The rest of the record still reads; the caller learns which field did not. A preset
      // that names no preset is a label (below), read as such.
      const bool label = key == "preset" && value.is_string();
      if (unread && !label) unread->push_back(key);
    }
  };
  for (const char* first : kFirstFields) {
    if (json.contains(first)) apply(first, json.at(first));
  }
  // Not a preset's name: a label ("qwen2 from config.json", what --model-config records), kept
  // as the run's; its shape is in the fields below.
  if (json.contains("preset") && json.at("preset").is_string()) {
    config.preset = json.at("preset").get<std::string>();
  }
  // Every record of a windowed run names its window; one without the key trained on the whole
  // sequence, including runs of a preset recorded before that preset had a window (mistral-7b).
  if (!json.contains("sliding_window")) config.model.sliding_window = 0;
  for (const auto& item : json.items()) {
    if (!is_first_field(item.key())) apply(item.key(), item.value());
  }
  return config;
}

std::string unread_fields_text(const std::vector<std::string>& unread) {
  constexpr std::size_t kNamesShown = 8;
  constexpr std::size_t kNameBytes = 64;  // ASCII characters; fewer where they take more bytes
  std::string text;
  for (std::size_t i = 0; i < unread.size() && i < kNamesShown; ++i) {
    std::string name = unread[i];
    if (name.size() > kNameBytes) {
      std::size_t cut = kNameBytes;
      // Back to the first byte of a character: a cut mid-character is no longer UTF-8.
      while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
      name = name.substr(0, cut) + "…";
    }
    for (char& c : name) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) c = '?';
    }
    text += (i ? ", " : "") + name;
  }
  if (unread.size() > kNamesShown) {
    text += " and " + std::to_string(unread.size() - kNamesShown) + " more";
  }
  return text;
}

}  // namespace rematlab
