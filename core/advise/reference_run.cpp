#include "advise/reference_run.h"

namespace rematlab::advise {

bool reduces_memory(const RunConfig& config) {
  return config.checkpoint != "none" || config.offload != "none";
}

bool same_configuration(const RunConfig& a, const RunConfig& b) {
  nlohmann::json left = to_json(a);
  nlohmann::json right = to_json(b);
  // Neither the policy nor what a run records changes the step being measured.
  for (const char* key : {"checkpoint", "offload", "timeline", "budget_bytes", "steps"}) {
    left.erase(key);
    right.erase(key);
  }
  return left == right;
}

std::optional<RunRecord> find_none_run(const RunRecord& run, const std::vector<RunRecord>& runs) {
  if (!reduces_memory(run.config)) return std::nullopt;
  std::optional<RunRecord> best;
  for (const RunRecord& other : runs) {
    if (other.id == run.id || !other.has_result || other.status != RunStatus::kOk) continue;
    if (reduces_memory(other.config) || !same_configuration(run.config, other.config)) continue;
    if (!best || other.id > best->id) best = other;
  }
  return best;
}

}  // namespace rematlab::advise
