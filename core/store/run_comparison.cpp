#include "store/run_comparison.h"

#include <set>

namespace rematlab {

std::vector<ComparisonRow> compare_runs(const std::vector<RunRecord>& runs) {
  std::vector<ComparisonRow> rows;
  if (runs.empty()) return rows;
  std::set<std::string> config_keys;
  std::vector<std::string> config_order;
  for (const RunRecord& run : runs) {
    for (const auto& item : run.config.items()) {
      if (config_keys.insert(item.key()).second) config_order.push_back(item.key());
    }
  }
  auto field_of = [](const nlohmann::json& object, const std::string& key) {
    return object.is_object() ? object.value(key, nlohmann::json()) : nlohmann::json();
  };

  ComparisonRow status{"status", false, {}, {}};
  for (const RunRecord& run : runs) status.values.push_back(run.status);
  rows.push_back(status);
  for (const std::string& key : config_order) {
    ComparisonRow row{key, false, {}, {}};
    for (const RunRecord& run : runs) row.values.push_back(field_of(run.config, key));
    bool differs = false;
    for (const auto& value : row.values) differs = differs || value != row.values.front();
    if (differs) rows.push_back(std::move(row));
  }

  std::set<std::string> seen;
  for (const RunRecord& run : runs) {
    if (!run.summary.is_object()) continue;
    for (const auto& item : run.summary.items()) {
      const std::string& key = item.key();
      if (!item.value().is_number() || config_keys.count(key) || !seen.insert(key).second) continue;
      if (key == "run_id") continue;
      ComparisonRow row{key, true, {}, {}};
      for (const RunRecord& other : runs) {
        const nlohmann::json value = field_of(other.summary, key);
        row.values.push_back(value);
        const nlohmann::json reference = field_of(runs.front().summary, key);
        if (value.is_number() && reference.is_number() && reference.get<double>() != 0.0) {
          row.ratio.push_back(value.get<double>() / reference.get<double>());
        } else {
          row.ratio.push_back(std::nullopt);
        }
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

}  // namespace rematlab
