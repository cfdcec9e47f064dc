// How rematlab-cli shows what the runs database holds: run tables, comparisons, the strategy
// table of a sweep, progress lines. Text on stdout, progress on stderr.
#pragma once

#include <string>
#include <vector>

#include "store/run_comparison.h"
#include "store/run_store.h"
#include "sweep/sweep_runner.h"

namespace rematlab::cli {

// The default database of the commands that need one.
inline constexpr const char* kDefaultDatabase = "rematlab.sqlite";

std::string format_runs_table(const std::vector<RunRecord>& runs);
std::string format_comparison(const std::vector<RunRecord>& runs,
                              const std::vector<ComparisonRow>& rows);
// The article's table: one row per run with its (max) batch, peak memory and tokens/s, and each
// against the first row.
std::string format_strategy_table(const std::vector<SweepRunResult>& results);
nlohmann::json strategy_rows_json(const std::vector<SweepRunResult>& results);
void print_sweep_progress(const SweepProgress& progress);
std::string format_duration(double seconds);

}  // namespace rematlab::cli
