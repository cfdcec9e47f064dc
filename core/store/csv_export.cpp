#include "store/csv_export.h"

#include "common/errors.h"
#include "common/json_numbers.h"
#include "common/posix_files.h"
#include "store/step_fields.h"

namespace rematlab {
namespace {

const std::vector<std::string>& identity_columns() {
  static const std::vector<std::string> columns = {
      "id",      "experiment_id", "experiment", "name",     "status",        "message",
      "started", "ended",         "host",       "libtorch", "steps_recorded"};
  return columns;
}

const std::vector<std::string>& request_columns() {
  static const std::vector<std::string> columns = {
      "request_max_batch_budget_bytes",    "request_max_batch_limit",
      "request_max_batch_probe_steps",     "request_plan_budget_bytes",
      "request_plan_predicted_peak_bytes", "request_plan_predicted_step_ms"};
  return columns;
}

// The config's fields in their stored order: the keys of to_json(RunConfig), those it writes
// only where they are set included (blank for a run without them).
std::vector<std::string> config_columns() {
  RunConfig every;
  every.model.family = ModelFamily::kLlama;
  every.model.qkv_bias = true;
  every.model.qk_norm = true;
  every.model.head_width = 1;
  every.model.sliding_window = 1;
  every.model.lora = default_lora_options(ModelFamily::kLlama);
  every.model.lora.base = BasePrecision::kBf16;
  every.model.moe = {2, 1, 1, 1, false, 0.01, 1.0};
  every.pp = 2;
  every.virtual_stages = 2;
  every.pp_split = {1};
  every.ep = 2;
  const nlohmann::json config = to_json(every);
  std::vector<std::string> keys;
  for (const auto& item : config.items()) keys.push_back(item.key());
  return keys;
}

// Beside the config columns: the recorded settings this build could not read, whose columns
// hold defaults the run may not have trained with. Every name in full (a CSV holds every value),
// separated by ';'; blank when all were read.
constexpr const char* kUnreadColumn = "unread_config_fields";

std::string unread_text(const RunRecord& run) {
  const std::vector<std::string>& names = run.unread_config_fields;
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i) text += (i ? ";" : "") + names[i];
  return text;
}

std::string value_text(const nlohmann::json& value) {
  if (value.is_null()) return "";
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) return number_text(value.get<double>());
  return value.dump();
}

void append_row(std::string& out, const std::vector<std::string>& fields) {
  for (std::size_t i = 0; i < fields.size(); ++i) out += (i ? "," : "") + csv_field(fields[i]);
  out += "\r\n";
}

std::vector<std::string> run_row(const RunRecord& run) {
  std::vector<std::string> row = {std::to_string(run.id),
                                  run.experiment_id ? std::to_string(*run.experiment_id) : "",
                                  run.experiment,
                                  run.name,
                                  to_string(run.status),
                                  run.message,
                                  run.started,
                                  run.ended,
                                  run.host,
                                  run.libtorch,
                                  std::to_string(run.steps_recorded)};
  const nlohmann::json config = shown_json(run.config);
  for (const std::string& key : config_columns()) {
    // A max-batch run that found no batch trained at none: blank, not a batch it never ran.
    if (key == "batch" && run.config.batch == 0) {
      row.emplace_back();
    } else {
      row.push_back(value_text(config.value(key, nlohmann::json())));
    }
  }
  row.push_back(unread_text(run));
  if (run.request.max_batch) {
    row.push_back(std::to_string(run.request.max_batch->budget_bytes));
    row.push_back(std::to_string(run.request.max_batch->limit));
    row.push_back(std::to_string(run.request.max_batch->probe_steps));
  } else {
    row.insert(row.end(), 3, "");
  }
  // A plan that found none that fits predicted nothing: its budget only.
  const auto& planned = run.request.plan;
  row.push_back(planned ? std::to_string(planned->budget_bytes) : "");
  const bool predicted = planned && !planned->chosen.empty();
  row.push_back(predicted ? std::to_string(planned->predicted_peak_bytes) : "");
  row.push_back(predicted ? number_text(planned->predicted_step_ms) : "");
  const bool measured = run.has_result && run.result.steps_completed > 0;
  for (const ResultField& field : result_fields()) {
    if (!measured && std::string(field.name) != "params") {
      row.emplace_back();
      continue;
    }
    row.push_back(std::visit(
        [&](auto member) -> std::string {
          if constexpr (std::is_same_v<decltype(member), double RunResult::*>) {
            return number_text(run.result.*member);
          } else {
            return std::to_string(run.result.*member);
          }
        },
        field.member));
  }
  row.push_back(run.result.peak_flops_source);
  return row;
}

}  // namespace

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

std::vector<std::string> runs_csv_header() {
  std::vector<std::string> header = identity_columns();
  for (const std::string& key : config_columns()) header.push_back(key);
  header.push_back(kUnreadColumn);
  for (const std::string& key : request_columns()) header.push_back(key);
  for (const ResultField& field : result_fields()) header.push_back(field.name);
  header.push_back("peak_flops_source");
  return header;
}

std::string runs_csv(const std::vector<RunRecord>& runs) {
  std::string out;
  append_row(out, runs_csv_header());
  for (const RunRecord& run : runs) append_row(out, run_row(run));
  return out;
}

std::string steps_csv(RunStore& store, const std::vector<RunRecord>& runs) {
  std::string out;
  std::vector<std::string> header = {"run_id", "run_name"};
  for (const StepField& field : step_fields()) header.push_back(field.name);
  append_row(out, header);
  for (const RunRecord& run : runs) {
    for (const StepMetrics& step : store.steps(run.id)) {
      std::vector<std::string> row = {std::to_string(run.id), run.name};
      for (const StepField& field : step_fields()) row.push_back(step_field_text(step, field));
      append_row(out, row);
    }
  }
  return out;
}

void write_file_atomically(const std::string& path, const std::string& text) {
  if (!files::is_valid_utf8(path)) throw InvalidInput("--csv", "the path is not valid UTF-8");
  if (files::is_directory(path)) throw InvalidInput("--csv", "'" + path + "' is a folder");
  const std::string error = files::write_file_durably(path, text);
  if (!error.empty()) throw InvalidInput("--csv", "cannot write '" + path + "': " + error);
}

}  // namespace rematlab
