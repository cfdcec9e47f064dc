// How rematlab-cli shows what the runs database holds: run tables, comparisons, the strategy
// table of a sweep, progress lines. Text on stdout, progress on stderr.
#pragma once

#include <string>
#include <vector>

#include "store/run_comparison.h"
#include "store/run_store.h"
#include "sweep/sweep_runner.h"

namespace rematlab::cli {

std::string format_runs_table(const std::vector<RunRecord>& runs);
std::string format_comparison(const std::vector<RunRecord>& runs, const RunComparison& comparison);
// The article's table: one row per run with its (max) batch, peak memory and tokens/s, and each
// against the first run that finished (the baseline).
std::string format_strategy_table(const std::vector<SweepRunResult>& results);
nlohmann::json strategy_rows_json(const std::vector<SweepRunResult>& results);
void print_sweep_progress(const SweepProgress& progress);
std::string format_duration(double seconds);
// A result value in its unit ("1.50 GiB", "12.3 ms", "41 %"); "-" when not measured.
std::string metric_text(const ResultField& field, const nlohmann::json& value);

}  // namespace rematlab::cli
