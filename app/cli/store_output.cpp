#include "cli/store_output.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/cli_output.h"
#include "common/byte_size.h"

namespace rematlab::cli {
namespace {

// Byte counts read best as sizes, everything else as it is.
std::string metric_text(const std::string& field, const nlohmann::json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) return value.get<std::string>();
  if (field.size() > 6 && field.compare(field.size() - 6, 6, "_bytes") == 0 && value.is_number()) {
    return format_bytes(value.get<int64_t>());
  }
  if (value.is_number_float()) return format_number(value.get<double>(), 4);
  return value.dump();
}

std::string status_of(const SweepRunResult& result) {
  return result.failed ? "failed" : to_string(result.summary.status);
}

}  // namespace

std::string format_runs_table(const std::vector<RunRecord>& runs) {
  std::vector<std::vector<std::string>> rows;
  for (const RunRecord& run : runs) {
    const auto& c = run.config;
    const auto& s = run.summary;
    rows.push_back({std::to_string(run.id), run.experiment, run.name, run.status,
                    c.value("preset", ""), c.value("checkpoint", ""), c.value("offload", ""),
                    std::to_string(c.value("batch", 0)), c.value("precision", ""),
                    std::to_string(run.steps_recorded),
                    s.contains("peak_bytes") ? format_bytes(s.value("peak_bytes", int64_t{0})) : "-",
                    s.contains("tokens_per_s") ? format_number(s.value("tokens_per_s", 0.0), 0) : "-",
                    run.started});
  }
  return format_table({"id", "experiment", "name", "status", "preset", "checkpoint", "offload",
                       "batch", "precision", "steps", "peak", "tokens/s", "started"},
                      rows);
}

std::string format_comparison(const std::vector<RunRecord>& runs,
                              const std::vector<ComparisonRow>& rows) {
  std::vector<std::string> header = {"field"};
  for (const RunRecord& run : runs) header.push_back("#" + std::to_string(run.id) + " " + run.name);
  std::vector<std::vector<std::string>> table;
  for (const ComparisonRow& row : rows) {
    std::vector<std::string> line = {row.field};
    for (std::size_t i = 0; i < row.values.size(); ++i) {
      std::string cell = metric_text(row.field, row.values[i]);
      if (row.metric && i > 0 && row.ratio[i]) cell += " (x" + format_number(*row.ratio[i], 3) + ")";
      line.push_back(cell);
    }
    table.push_back(line);
  }
  return format_table(header, table);
}

std::string format_strategy_table(const std::vector<SweepRunResult>& results) {
  std::vector<std::vector<std::string>> rows;
  const RunSummary* baseline = nullptr;
  for (const SweepRunResult& result : results) {
    if (!result.failed && result.summary.status == RunStatus::kOk) {
      baseline = &result.summary;
      break;
    }
  }
  for (const SweepRunResult& r : results) {
    const RunSummary& s = r.summary;
    const bool measured = !r.failed && !s.steps.empty();
    auto change = [&](double value, double reference) {
      return measured && baseline ? format_percent_change(value, reference) : std::string("-");
    };
    const std::string batch_change =
        measured && baseline && baseline->config.batch > 0
            ? "x" + format_number(static_cast<double>(s.config.batch) /
                                      static_cast<double>(baseline->config.batch),
                                  2)
            : "-";
    rows.push_back(
        {r.point.label, status_of(r), std::to_string(s.config.batch), batch_change,
         measured ? format_bytes(s.peak_bytes) : "-",
         change(static_cast<double>(s.peak_bytes), baseline ? baseline->peak_bytes : 0.0),
         measured ? format_bytes(s.peak_activation_bytes) : "-",
         measured ? format_number(s.tokens_per_s, 0) : "-",
         change(s.tokens_per_s, baseline ? baseline->tokens_per_s : 0.0),
         r.run_id ? std::to_string(*r.run_id) : "-"});
  }
  const bool searched = std::any_of(results.begin(), results.end(),
                                    [](const SweepRunResult& r) { return r.search.has_value(); });
  return format_table({"run", "status", searched ? "max batch" : "batch", "batch vs base", "peak",
                       "peak vs base", "peak act", "tokens/s", "tok/s vs base", "run id"},
                      rows);
}

nlohmann::json strategy_rows_json(const std::vector<SweepRunResult>& results) {
  nlohmann::json rows = nlohmann::json::array();
  for (const SweepRunResult& r : results) {
    nlohmann::json row = to_json(r.summary);
    row.erase("timeline");
    row["label"] = r.point.label;
    row["status"] = status_of(r);
    if (r.failed) row["status_message"] = r.summary.message;
    if (r.search) {
      row["max_batch"] = r.search->max_batch;
      nlohmann::json trials = nlohmann::json::array();
      for (const BatchProbe& p : r.search->probes) {
        trials.push_back({{"batch", p.batch}, {"status", to_string(p.status)}, {"peak_bytes", p.peak_bytes}});
      }
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
