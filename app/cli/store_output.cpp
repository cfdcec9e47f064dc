#include "cli/store_output.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/cli_output.h"
#include "common/byte_size.h"
#include "common/json_numbers.h"

namespace rematlab::cli {
namespace {

std::string cell_text(const nlohmann::json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) return format_number(value.get<double>(), 4);
  return value.dump();
}

std::string batch_text(const RunConfig& config) {
  return config.batch > 0 ? std::to_string(config.batch) : "-";
}

}  // namespace

std::string metric_text(const ResultField& field, const nlohmann::json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) return value.get<std::string>();  // nan, inf
  const double number = value.get<double>();
  switch (field.unit) {
    case ResultUnit::kBytes:
      return format_bytes(static_cast<int64_t>(number));
    case ResultUnit::kMilliseconds:
      return format_number(number, 1) + " ms";
    case ResultUnit::kTokensPerSecond:
      return format_number(number, 0);
    case ResultUnit::kLoss:
      return format_number(number, 4);
    case ResultUnit::kFlops:
      return format_number(number / 1e9, 2) + " GFLOP";
    case ResultUnit::kFraction:
      return format_number(100.0 * number, 1) + " %";
    case ResultUnit::kCount:
      return format_number(number, 0);
  }
  return cell_text(value);
}

std::string format_runs_table(const std::vector<RunRecord>& runs) {
  std::vector<std::vector<std::string>> rows;
  for (const RunRecord& run : runs) {
    const bool has = run.has_result && run.result.steps_completed > 0;
    rows.push_back({std::to_string(run.id), run.experiment, run.name, to_string(run.status),
                    run.config.preset, run.config.checkpoint, run.config.offload,
                    batch_text(run.config), to_string(run.config.precision),
                    std::to_string(run.steps_recorded),
                    has ? format_bytes(run.result.peak_bytes) : "-",
                    has ? format_number(run.result.tokens_per_s, 0) : "-", run.started});
  }
  return format_table({"id", "experiment", "name", "status", "preset", "checkpoint", "offload",
                       "batch", "precision", "steps", "peak", "tokens/s", "started"},
                      rows);
}

std::string format_comparison(const std::vector<RunRecord>& runs, const RunComparison& comparison) {
  std::vector<std::string> header = {"field"};
  for (std::size_t i = 0; i < runs.size(); ++i) {
    header.push_back(runs[i].label() + (i == comparison.baseline ? " (baseline)" : ""));
  }
  std::vector<std::vector<std::string>> table;
  for (const ComparisonRow& row : comparison.rows) {
    std::vector<std::string> line = {row.field};
    for (std::size_t i = 0; i < row.values.size(); ++i) {
      std::string cell =
          row.metric ? metric_text(*row.metric, row.values[i]) : cell_text(row.values[i]);
      if (row.metric && i != comparison.baseline && row.ratio[i]) {
        cell += " (x" + format_number(*row.ratio[i], 3) + ")";
      }
      line.push_back(cell);
    }
    table.push_back(line);
  }
  std::string text = format_table(header, table);
  std::string front;
  for (std::size_t index : comparison.pareto_front) front += " " + runs[index].label();
  text +=
      "\nPareto front (least peak memory for the tokens/s):" + (front.empty() ? " none" : front);
  text += "\n";
  for (const std::string& warning : comparison.warnings) text += "warning: " + warning + "\n";
  return text;
}

std::string format_strategy_table(const std::vector<SweepRunResult>& results) {
  std::vector<RunRecord> records;
  for (const SweepRunResult& result : results) records.push_back(result.record());
  std::size_t baseline = 0;
  while (baseline < records.size() && !measured(records[baseline])) ++baseline;
  const RunComparison comparison = compare_runs(records, baseline);
  auto ratio = [&](std::size_t i, const char* metric) {
    const auto value = comparison.ratio(i, metric);
    return value ? "x" + format_number(*value, 2) : std::string("-");
  };
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const RunRecord& run = records[i];
    const bool has = run.has_result;
    const bool batch_known =
        run.config.batch > 0 && records[baseline].config.batch > 0 && baseline < records.size();
    rows.push_back(
        {results[i].point.label, to_string(run.status), batch_text(run.config),
         batch_known ? "x" + format_number(static_cast<double>(run.config.batch) /
                                               static_cast<double>(records[baseline].config.batch),
                                           2)
                     : "-",
         has ? format_bytes(run.result.peak_bytes) : "-", ratio(i, "peak_bytes"),
         has ? format_bytes(run.result.peak_activation_bytes) : "-",
         has ? format_number(run.result.tokens_per_s, 0) : "-", ratio(i, "tokens_per_s"),
         results[i].run_id ? std::to_string(*results[i].run_id) : "-"});
  }
  const bool searched = std::any_of(results.begin(), results.end(),
                                    [](const SweepRunResult& r) { return r.search.has_value(); });
  std::string text =
      format_table({"run", "status", searched ? "max batch" : "batch", "batch vs base", "peak",
                    "peak vs base", "peak act", "tokens/s", "tok/s vs base", "run id"},
                   rows);
  for (const std::string& warning : comparison.warnings) text += "warning: " + warning + "\n";
  return text;
}

nlohmann::json strategy_rows_json(const std::vector<SweepRunResult>& results) {
  nlohmann::json rows = nlohmann::json::array();
  for (const SweepRunResult& r : results) {
    nlohmann::json row = to_json(r.summary);
    row.erase("timeline");
    row["label"] = r.point.label;
    if (r.search) {
      row["max_batch"] = r.search->max_batch;
      nlohmann::json trials = nlohmann::json::array();
      for (const BatchProbe& probe : r.search->probes) trials.push_back(to_json(probe));
      row["trials"] = trials;
    }
    rows.push_back(row);
  }
  return rows;
}

std::string format_duration(double seconds) {
  if (seconds < 0) return "?";
  char text[32];
  const long total = static_cast<long>(seconds + 0.5);
  if (total >= 3600) {
    std::snprintf(text, sizeof text, "%ldh%02ldm", total / 3600, (total / 60) % 60);
  } else {
    std::snprintf(text, sizeof text, "%ldm%02lds", total / 60, total % 60);
  }
  return text;
}

void print_sweep_progress(const SweepProgress& progress) {
  std::string prefix = "[run " + std::to_string(progress.run_index + 1) + "/" +
                       std::to_string(progress.run_count) + " " + progress.label;
  if (progress.eta_s >= 0) prefix += ", sweep ETA " + format_duration(progress.eta_s);
  prefix += "] ";
  if (progress.step) {
    print_step_progress(*progress.step, prefix);
  } else {
    std::cerr << prefix << progress.activity << std::endl;
  }
}

}  // namespace rematlab::cli
