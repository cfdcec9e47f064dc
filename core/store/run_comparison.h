// Runs side by side against a chosen baseline: the config fields in which they differ, what was
// asked of them, every measured metric with its ratio to the baseline's, the memory/throughput
// Pareto front, and warnings when the runs are not comparable. `compare`, the sweep's strategy
// table and the window's compare view all read this one comparison.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "store/run_store.h"

namespace rematlab {

struct ComparisonRow {
  enum class Kind { kStatus, kConfig, kRequest, kMetric };
  std::string field;
  Kind kind = Kind::kConfig;
  const ResultField* metric = nullptr;       // kMetric rows
  std::vector<nlohmann::json> values;        // one per run; null where not measured or not set
  std::vector<std::optional<double>> ratio;  // kMetric: value / the baseline's; else empty
};

struct RunComparison {
  std::size_t baseline = 0;
  std::vector<ComparisonRow> rows;
  // Runs that trained every step and that no other such run beats on both peak memory (lower)
  // and tokens/s (higher), in increasing peak memory.
  std::vector<std::size_t> pareto_front;
  // Why ratios may mislead, e.g. "the runs train different models (d_model, layers)".
  std::vector<std::string> warnings;

  const ComparisonRow* row(const std::string& field) const;
  // The run's ratio to the baseline on a metric row, if both were measured.
  std::optional<double> ratio(std::size_t run, const std::string& metric) const;
};

// Whether the run trained every step, so its measurements describe the whole run.
bool measured(const RunRecord& run);

RunComparison compare_runs(const std::vector<RunRecord>& runs, std::size_t baseline = 0);

// Indices of the points (peak bytes, tokens/s) that no other point beats on both, in increasing
// peak bytes. Ties on both count as one point on the front (the first given).
std::vector<std::size_t> pareto_front(const std::vector<std::pair<double, double>>& points);

nlohmann::json to_json(const RunComparison& comparison, const std::vector<RunRecord>& runs);

}  // namespace rematlab
