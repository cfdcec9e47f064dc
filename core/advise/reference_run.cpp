#include "advise/reference_run.h"

#include <algorithm>
#include <iterator>

namespace rematlab::advise {
namespace {

// What a step costs in memory and time depends on these (to_json's keys), and on nothing else a
// run records.
const char* const kCostKeys[] = {
    "arch", "layers", "d_model", "heads", "kv_heads", "mlp_hidden", "seq_len", "vocab", "dropout",
    "attention", "tie_head", "loss_chunks", "batch", "accum", "precision", "threads", "device",
    "tf32", "deterministic", "world_size", "shard", "bucket_bytes", "tp", "sequence_parallel",
    // Written only where set (absent and absent compare equal).
    "qkv_bias", "qk_norm", "head_dim", "finetune", "lora_rank", "lora_alpha", "lora_targets",
    "base_precision", "sliding_window", "pp", "virtual_stages", "pp_split", "ep", "experts",
    "experts_per_token", "expert_hidden", "shared_expert_hidden", "expert_weights",
    "balance_coefficient", "capacity_factor"};

// Expected to differ between a run and its reference, so never said.
const char* const kPolicyKeys[] = {"checkpoint", "offload", "timeline", "budget_bytes", "preset"};

template <std::size_t N>
bool is_one_of(const std::string& key, const char* const (&keys)[N]) {
  return std::find(std::begin(keys), std::end(keys), key) != std::end(keys);
}

std::vector<std::string> differing_keys(const RunConfig& a, const RunConfig& b) {
  const nlohmann::json left = to_json(a);
  const nlohmann::json right = to_json(b);
  std::vector<std::string> keys;
  for (const auto& item : left.items()) {
    if (is_one_of(item.key(), kPolicyKeys)) continue;
    if (!right.contains(item.key()) || right.at(item.key()) != item.value()) {
      keys.push_back(item.key());
    }
  }
  return keys;
}

}  // namespace

bool reduces_memory(const RunConfig& config) {
  return config.checkpoint != "none" || config.offload != "none";
}

bool same_configuration(const RunConfig& a, const RunConfig& b) {
  const nlohmann::json left = to_json(a);
  const nlohmann::json right = to_json(b);
  return std::all_of(std::begin(kCostKeys), std::end(kCostKeys), [&](const char* key) {
    return left.value(key, nlohmann::json()) == right.value(key, nlohmann::json());
  });
}

std::string describe_differences(const RunConfig& run, const RunConfig& reference) {
  const nlohmann::json values = to_json(reference);
  std::string text;
  for (const std::string& key : differing_keys(run, reference)) {
    // A field only one side records (finetune, say): the reference's is its absence.
    const nlohmann::json value = values.value(key, nlohmann::json("none"));
    text += (text.empty() ? "" : ", ") + key + " " +
            (value.is_string() ? value.get<std::string>() : value.dump());
  }
  return text;
}

std::optional<RunRecord> find_none_run(const RunRecord& run, const std::vector<RunRecord>& runs) {
  if (!reduces_memory(run.config) || !run.unread_config_fields.empty()) return std::nullopt;
  std::optional<RunRecord> best;
  std::size_t best_differences = 0;
  for (const RunRecord& other : runs) {
    if (other.id == run.id || !other.has_result || other.status != RunStatus::kOk) continue;
    if (!other.unread_config_fields.empty()) continue;
    if (reduces_memory(other.config) || !same_configuration(run.config, other.config)) continue;
    const std::size_t differences = differing_keys(run.config, other.config).size();
    if (!best || differences < best_differences ||
        (differences == best_differences && other.id > best->id)) {
      best = other;
      best_differences = differences;
    }
  }
  return best;
}

}  // namespace rematlab::advise
