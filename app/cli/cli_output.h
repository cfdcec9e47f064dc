// Output conventions of rematlab-cli: progress on stderr, results on stdout, and with --json
// one JSON object as the last line of stdout.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run/step_metrics.h"

namespace rematlab::cli {

void print_json_line(const nlohmann::json& object);
void print_step_progress(const StepMetrics& step, const std::string& label);

// A plain-text table with right-aligned columns after the first.
std::string format_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows);
std::string format_number(double value, int decimals);
std::string format_percent_change(double value, double baseline);

}  // namespace rematlab::cli
