// Runs side by side: the config fields in which they differ, then every numeric summary metric
// with its ratio to the first run (the reference). The CLI prints it; the GUI shows it.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "store/run_store.h"

namespace rematlab {

struct ComparisonRow {
  std::string field;
  bool metric = false;                       // a summary metric (else a differing config field)
  std::vector<nlohmann::json> values;        // one per run, null where the run has none
  std::vector<std::optional<double>> ratio;  // value / the first run's value (metrics only)
};

std::vector<ComparisonRow> compare_runs(const std::vector<RunRecord>& runs);

}  // namespace rematlab
