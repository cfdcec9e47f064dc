#include "store/csv_export.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "common/errors.h"
#include "store/step_fields.h"

namespace rematlab {
namespace {

std::string value_text(const nlohmann::json& value) {
  if (value.is_null()) return "";
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

void append_row(std::string& out, const std::vector<std::string>& fields) {
  for (std::size_t i = 0; i < fields.size(); ++i) out += (i ? "," : "") + csv_field(fields[i]);
  out += "\r\n";
}

// Keys of every object, in first-seen order, skipping those already in `taken`.
std::vector<std::string> union_of_keys(const std::vector<const nlohmann::json*>& objects,
                                       std::set<std::string>& taken) {
  std::vector<std::string> keys;
  for (const nlohmann::json* object : objects) {
    if (!object->is_object()) continue;
    for (const auto& item : object->items()) {
      if (taken.insert(item.key()).second) keys.push_back(item.key());
    }
  }
  return keys;
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

std::string runs_csv(const std::vector<RunRecord>& runs) {
  const std::vector<std::string> identity = {"id",     "experiment_id", "experiment", "name",
                                             "status", "message",       "started",    "ended",
                                             "host",   "libtorch",      "steps_recorded"};
  std::set<std::string> taken(identity.begin(), identity.end());
  std::vector<const nlohmann::json*> configs, summaries;
  for (const RunRecord& run : runs) {
    configs.push_back(&run.config);
    summaries.push_back(&run.summary);
  }
  const std::vector<std::string> config_keys = union_of_keys(configs, taken);
  const std::vector<std::string> summary_keys = union_of_keys(summaries, taken);

  std::string out;
  std::vector<std::string> header = identity;
  header.insert(header.end(), config_keys.begin(), config_keys.end());
  header.insert(header.end(), summary_keys.begin(), summary_keys.end());
  append_row(out, header);
  for (const RunRecord& run : runs) {
    std::vector<std::string> row = {
        std::to_string(run.id),
        run.experiment_id ? std::to_string(*run.experiment_id) : "",
        run.experiment, run.name, run.status, run.message, run.started, run.ended, run.host,
        run.libtorch, std::to_string(run.steps_recorded)};
    for (const std::string& key : config_keys) row.push_back(value_text(run.config.value(key, nlohmann::json())));
    for (const std::string& key : summary_keys) row.push_back(value_text(run.summary.value(key, nlohmann::json())));
    append_row(out, row);
  }
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
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (!file) throw InvalidInput("--csv", "cannot create '" + path + "': " + std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const int write_errno = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed || std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int reason = !written ? write_errno : errno;
    std::remove(temporary.c_str());
    throw InvalidInput("--csv", "cannot write '" + path + "': " + std::strerror(reason));
  }
}

}  // namespace rematlab
