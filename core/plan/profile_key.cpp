#include "plan/profile_key.h"

#include <ATen/Parallel.h>

#include "checkpoint/checkpoint_policy.h"
#include "common/json_text.h"
#include "common/process_identity.h"
#include "compat/torch_compat.h"
#include "model/model_config.h"
#include "run/run_fields.h"

namespace rematlab::plan {
namespace {

// 2: piece times scaled to a whole step (time_scale); 3: and what an early stop saves, per stage;
// 4, for the configurations the engine then ran otherwise (others keep 3, so their kept profiles
// stay found): adapted and quantised tails stop early, and on CUDA a sliding window over shared
// key/value heads may repeat them rather than fall back to the explicit kernel.
constexpr int kProfileMethod = 3;
constexpr int kFineTuningAndWindowMethod = 4;

int profile_method(const RunConfig& config) {
  const ModelConfig& model = config.model;
  const bool shared_heads = model.key_value_heads() < model.heads;
  const bool cuda_window =
      model.sliding_window > 0 && shared_heads && config.device.rfind("cuda", 0) == 0;
  return model.lora.enabled() || cuda_window ? kFineTuningAndWindowMethod : kProfileMethod;
}

}  // namespace

bool needs_chain_costs(const RunConfig& config) {
  return config.pp_split_balanced || CheckpointPolicy::parse(config.checkpoint).is_plan();
}

std::string profile_key(const RunConfig& config, int repeats) {
  return profile_key(config, repeats, current_process().host, compat::torch_version());
}

std::string profile_key(const RunConfig& config, int repeats, const std::string& host,
                        const std::string& libtorch) {
  nlohmann::json profiled = to_json(config);
  for (const char* unrelated :
       {"preset", "steps", "warmup_steps", "lr", "weight_decay", "seed", "checkpoint", "offload",
        "data", "budget_bytes", "timeline", "loss_scale", "loss_scale_growth_interval",
        "world_size", "shard", "bucket_bytes",
        // The whole chain is profiled on every rank: where the stages split it changes nothing.
        "pp_split"}) {
    profiled.erase(unrelated);
  }
  // Measured by several ranks at once (parallel/ranks_profile.h), a chain is not one process's:
  // they share the host. One process's key stays as it was, so kept profiles stay found.
  if (config.world_size > 1) profiled["ranks"] = config.world_size;
  // One process's chain, as before tensor parallelism was a setting (kept profiles stay found).
  if (profiled["tp"] == 1) profiled.erase("tp");
  if (profiled["sequence_parallel"] == false) profiled.erase("sequence_parallel");
  // "LibTorch's default" is as many threads as this thread computes with: the number, not the
  // default.
  if (profiled["threads"] == 0) profiled["threads"] = at::get_num_threads();
  // nlohmann's object keeps its keys sorted: one config, one text. `method` changes whenever
  // profile_chain measures otherwise, so that no kept profile of another method is reused.
  return nlohmann::json{{"method", profile_method(config)},
                        {"host", host},
                        {"libtorch", libtorch},
                        {"repeats", repeats},
                        {"config", profiled}}
      .dump();
}

std::optional<ProfiledConfiguration> read_profile_key(const std::string& key,
                                                      std::string* refused) {
  const nlohmann::json json = parse_json_or_null(key);
  if (!json.is_object() || !json.contains("config") || !json["config"].is_object()) {
    return std::nullopt;
  }
  // A stored key is not trusted to hold what this build writes: a field of another type (a hand
  // edit, another version) makes the key unread, never an exception into the window's loop.
  const auto integer = [&json](const char* name) {
    return json.contains(name) && json[name].is_number_integer();
  };
  const auto text = [&json](const char* name) {
    return !json.contains(name) || json[name].is_string();
  };
  if (!integer("method") || !text("host") || !text("libtorch") ||
      (json.contains("repeats") && !integer("repeats"))) {
    return std::nullopt;
  }
  const int64_t method = json["method"].get<int64_t>();
  if (method != kProfileMethod && method != kFineTuningAndWindowMethod) return std::nullopt;
  nlohmann::json config = json["config"];
  int64_t ranks = 1;
  if (config.contains("ranks")) {
    const nlohmann::json& given = config["ranks"];
    // A key this build wrote names 2 or more; anything else was not.
    if (!given.is_number_integer() || given.get<int64_t>() < 2 ||
        given.get<int64_t>() > kMaxWorldSize) {
      return std::nullopt;
    }
    ranks = given.get<int64_t>();
    config.erase("ranks");
  }
  std::vector<std::string> unread;
  ProfiledConfiguration profiled{run_config_from_record(config, &unread), json.value("repeats", 0),
                                 json.value("host", ""), json.value("libtorch", "")};
  if (!unread.empty()) {
    if (refused) {
      *refused =
          "a kept profile's configuration holds settings not known to this version (a "
          "newer RematLab or a hand edit): " +
          unread_fields_text(unread) + " could not be read";
    }
    return std::nullopt;
  }
  profiled.config.world_size = ranks;
  if (profile_method(profiled.config) != method) return std::nullopt;  // measured otherwise
  // The key leaves the preset out (it changes nothing measured); a model of a preset's shape is
  // named by it again, any other is "custom".
  profiled.config.preset = "custom";
  for (const std::string& name : preset_names()) {
    RunConfig candidate = profiled.config;
    candidate.model = model_preset(name);
    candidate.model.lora = profiled.config.model.lora;  // adapters on a preset: still the preset
    if (to_json(candidate) == to_json(profiled.config)) {
      profiled.config.preset = name;
      break;
    }
  }
  return profiled;
}

}  // namespace rematlab::plan
