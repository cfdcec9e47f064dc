#include "store/run_comparison.h"

#include <algorithm>
#include <cmath>

#include "common/json_numbers.h"
#include "run/run_fields.h"

namespace rematlab {
namespace {

// Config fields that make two runs different experiments rather than two ways to run one: a
// difference in these turns every ratio into a comparison of different workloads.
const std::vector<std::string>& workload_fields() {
  static const std::vector<std::string> fields = {
      "preset",     "layers",       "d_model",        "heads",         "seq_len",
      "vocab",      "attention",    "dropout",        "data",          "device",
      "qkv_bias",   "qk_norm",      "head_dim",       "finetune",      "lora_rank",
      "lora_alpha", "lora_targets", "base_precision", "sliding_window"};
  return fields;
}

nlohmann::json request_value(const RunRecord& run, const std::string& field) {
  if (!run.request.max_batch) return nullptr;
  if (field == "max_batch_budget_bytes") return run.request.max_batch->budget_bytes;
  if (field == "max_batch_limit") return run.request.max_batch->limit;
  return nullptr;
}

bool all_equal(const std::vector<nlohmann::json>& values) {
  return std::all_of(values.begin(), values.end(),
                     [&](const nlohmann::json& v) { return v == values.front(); });
}

}  // namespace

bool measured(const RunRecord& run) {
  return run.has_result && run.result.steps_completed > 0 && run.status == RunStatus::kOk;
}

const ComparisonRow* RunComparison::row(const std::string& field) const {
  for (const ComparisonRow& candidate : rows) {
    if (candidate.field == field) return &candidate;
  }
  return nullptr;
}

std::optional<double> RunComparison::ratio(std::size_t run, const std::string& metric) const {
  const ComparisonRow* found = row(metric);
  if (!found || found->kind != ComparisonRow::Kind::kMetric || run >= found->ratio.size()) {
    return std::nullopt;
  }
  return found->ratio[run];
}

std::vector<std::size_t> pareto_front(const std::vector<std::pair<double, double>>& points) {
  std::vector<std::size_t> front;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto [memory, speed] = points[i];
    bool beaten = false;
    for (std::size_t j = 0; j < points.size() && !beaten; ++j) {
      if (j == i) continue;
      const auto [other_memory, other_speed] = points[j];
      const bool at_least_as_good = other_memory <= memory && other_speed >= speed;
      const bool strictly_better = other_memory < memory || other_speed > speed;
      // An identical point earlier in the list stands for both.
      beaten = at_least_as_good && (strictly_better || j < i);
    }
    if (!beaten) front.push_back(i);
  }
  std::sort(front.begin(), front.end(),
            [&](std::size_t a, std::size_t b) { return points[a].first < points[b].first; });
  return front;
}

namespace {

// Every run's config keys, the first run's order first: a field only later runs record
// (finetune) still gets its row.
std::vector<std::string> config_keys(const std::vector<nlohmann::json>& configs) {
  std::vector<std::string> keys;
  for (const nlohmann::json& config : configs) {
    for (const auto& item : config.items()) {
      if (std::find(keys.begin(), keys.end(), item.key()) == keys.end()) keys.push_back(item.key());
    }
  }
  return keys;
}

// What a reader of the ratios must know: other workloads, runs that stopped early, recorded
// settings this build could not read (a newer RematLab's, or a hand edit).
std::vector<std::string> comparison_warnings(const std::vector<RunRecord>& runs,
                                             const std::vector<std::string>& differing_workload) {
  auto listed = [](const std::vector<std::string>& names) {
    std::string text;
    for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
    return text;
  };
  std::vector<std::string> warnings;
  if (!differing_workload.empty()) {
    warnings.push_back("the runs train different workloads (they differ in " +
                       listed(differing_workload) +
                       "): ratios compare different models, not policies");
  }
  for (const RunRecord& run : runs) {
    if (run.status != RunStatus::kOk && run.has_result && run.result.steps_completed > 0) {
      warnings.push_back(run.label() + " ended " + to_string(run.status) + " after " +
                         std::to_string(run.result.steps_completed) +
                         " steps: its figures cover only those");
    }
    if (!run.unread_config_fields.empty()) {
      // Bounded and cut: the names come from the record, which a hand edit can fill with anything.
      warnings.push_back(run.label() +
                         " holds settings not known to this version (a newer RematLab or a hand "
                         "edit): its " +
                         unread_fields_text(run.unread_config_fields) +
                         " could not be read and show the default");
    }
  }
  return warnings;
}

}  // namespace

RunComparison compare_runs(const std::vector<RunRecord>& runs, std::size_t baseline) {
  RunComparison comparison;
  if (runs.empty()) return comparison;
  comparison.baseline = std::min(baseline, runs.size() - 1);

  ComparisonRow status{"status", ComparisonRow::Kind::kStatus, nullptr, {}, {}};
  for (const RunRecord& run : runs) status.values.push_back(to_string(run.status));
  comparison.rows.push_back(std::move(status));

  std::vector<nlohmann::json> configs;
  for (const RunRecord& run : runs) configs.push_back(shown_json(run.config));
  std::vector<std::string> differing_workload;
  for (const std::string& key : config_keys(configs)) {
    ComparisonRow row{key, ComparisonRow::Kind::kConfig, nullptr, {}, {}};
    for (const nlohmann::json& config : configs) {
      row.values.push_back(config.value(key, nlohmann::json()));
    }
    if (all_equal(row.values)) continue;
    if (std::find(workload_fields().begin(), workload_fields().end(), key) !=
        workload_fields().end()) {
      differing_workload.push_back(key);
    }
    comparison.rows.push_back(std::move(row));
  }
  for (const char* field : {"max_batch_budget_bytes", "max_batch_limit"}) {
    ComparisonRow row{
        std::string("request_") + field, ComparisonRow::Kind::kRequest, nullptr, {}, {}};
    for (const RunRecord& run : runs) row.values.push_back(request_value(run, field));
    if (!all_equal(row.values) || !row.values.front().is_null()) {
      comparison.rows.push_back(std::move(row));
    }
  }

  const RunRecord& reference = runs[comparison.baseline];
  for (const ResultField& field : result_fields()) {
    ComparisonRow row{field.name, ComparisonRow::Kind::kMetric, &field, {}, {}};
    const bool reference_measured = reference.has_result && reference.result.steps_completed > 0;
    const double reference_value = result_value(reference.result, field);
    for (const RunRecord& run : runs) {
      const bool has_value = run.has_result && run.result.steps_completed > 0;
      const double value = result_value(run.result, field);
      row.values.push_back(has_value ? json_number(value) : nlohmann::json());
      const bool divisible = has_value && reference_measured && reference_value != 0.0 &&
                             std::isfinite(value) && std::isfinite(reference_value);
      row.ratio.push_back(divisible ? std::optional<double>(value / reference_value)
                                    : std::nullopt);
    }
    comparison.rows.push_back(std::move(row));
  }

  std::vector<std::pair<double, double>> points;
  std::vector<std::size_t> candidates;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (!measured(runs[i])) continue;
    candidates.push_back(i);
    points.emplace_back(static_cast<double>(runs[i].result.peak_bytes),
                        runs[i].result.tokens_per_s);
  }
  for (std::size_t index : pareto_front(points))
    comparison.pareto_front.push_back(candidates[index]);

  comparison.warnings = comparison_warnings(runs, differing_workload);
  return comparison;
}

nlohmann::json to_json(const RunComparison& comparison, const std::vector<RunRecord>& runs) {
  nlohmann::json ids = nlohmann::json::array();
  for (const RunRecord& run : runs) ids.push_back(run.id);
  nlohmann::json rows = nlohmann::json::array();
  for (const ComparisonRow& row : comparison.rows) {
    nlohmann::json ratios = nlohmann::json::array();
    for (const auto& ratio : row.ratio) ratios.push_back(ratio ? nlohmann::json(*ratio) : nullptr);
    const char* kinds[] = {"status", "config", "request", "metric"};
    rows.push_back({{"field", row.field},
                    {"kind", kinds[static_cast<int>(row.kind)]},
                    {"metric", row.kind == ComparisonRow::Kind::kMetric},
                    {"values", row.values},
                    {"ratio", ratios}});
  }
  nlohmann::json front = nlohmann::json::array();
  for (std::size_t index : comparison.pareto_front) front.push_back(runs[index].id);
  return {
      {"runs", ids},
      {"baseline", runs.empty() ? nlohmann::json() : nlohmann::json(runs[comparison.baseline].id)},
      {"rows", rows},
      {"pareto_front", front},
      {"warnings", comparison.warnings}};
}

}  // namespace rematlab
