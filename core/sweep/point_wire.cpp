#include "sweep/point_wire.h"

#include <stdexcept>

#include "common/json_numbers.h"
#include "common/json_text.h"
#include "run/run_fields.h"

namespace rematlab {
namespace {

RunStatus status_from(const nlohmann::json& json) {
  const std::optional<RunStatus> status = parse_run_status(json.get<std::string>());
  if (!status) throw std::invalid_argument("unknown run status " + brief_json(json));
  return *status;
}

}  // namespace

nlohmann::json probe_on_the_wire(const BatchProbe& probe) {
  nlohmann::json json = to_json(probe);
  json["message"] = probe.message;
  return json;
}

nlohmann::json to_json(const PointOutcome& outcome) {
  const RunSummary& summary = outcome.summary;
  nlohmann::json timeline = nlohmann::json::array();
  for (const TimelinePoint& point : summary.timeline) {
    timeline.push_back({json_number(point.time_ms), point.bytes, to_string(point.phase)});
  }
  nlohmann::json json = {{"status", to_string(summary.status)},
                         {"message", summary.message},
                         {"engine_failed", outcome.engine_failed},
                         {"config", to_json(summary.config)},
                         {"result", to_json(static_cast<const RunResult&>(summary))},
                         {"timeline", std::move(timeline)},
                         {"timeline_step", summary.timeline_step}};
  if (outcome.search) {
    nlohmann::json probes = nlohmann::json::array();
    for (const BatchProbe& probe : outcome.search->probes) {
      probes.push_back(probe_on_the_wire(probe));
    }
    json["search"] = {{"max_batch", outcome.search->max_batch},
                      {"peak_bytes", outcome.search->peak_bytes},
                      {"cancelled", outcome.search->cancelled},
                      {"probes", std::move(probes)}};
  }
  return json;
}

PointOutcome point_outcome_from_json(const nlohmann::json& json) {
  PointOutcome outcome;
  RunSummary& summary = outcome.summary;
  static_cast<RunResult&>(summary) = run_result_from_json(json.at("result"));
  summary.status = status_from(json.at("status"));
  summary.message = json.at("message").get<std::string>();
  outcome.engine_failed = json.at("engine_failed").get<bool>();
  // The record's reading is tolerant of fields it cannot take; the coordinator is not: a setting
  // it cannot read (a worker of a newer build, or an edited message) would be recorded as its
  // default, so the outcome is refused, naming it. The batch is not optional (a max-batch search
  // that fitted nothing trained at batch 0, which no run field accepts).
  const nlohmann::json& config = json.at("config");
  std::vector<std::string> unread;
  summary.config = run_config_from_record(config, &unread);
  if (!unread.empty()) {
    throw std::invalid_argument(
        "the outcome's config holds settings not known to this version (a newer RematLab or a "
        "hand edit): " +
        unread_fields_text(unread) + " could not be read");
  }
  summary.config.batch = config.at("batch").get<int64_t>();
  summary.config.peak_flops = summary.peak_flops;
  summary.config.peak_flops_source = summary.peak_flops_source;
  for (const nlohmann::json& point : json.at("timeline")) {
    summary.timeline.push_back({number_from_json(point.at(0)), point.at(1).get<int64_t>(),
                                parse_memory_phase(point.at(2).get<std::string>())});
  }
  summary.timeline_step = json.at("timeline_step").get<int64_t>();
  if (json.contains("search")) {
    const nlohmann::json& search = json.at("search");
    MaxBatchResult found;
    found.max_batch = search.at("max_batch").get<int64_t>();
    found.peak_bytes = search.at("peak_bytes").get<int64_t>();
    found.cancelled = search.at("cancelled").get<bool>();
    for (const nlohmann::json& probe : search.at("probes")) {
      found.probes.push_back(batch_probe_from_json(probe));
    }
    outcome.search = std::move(found);
  }
  return outcome;
}

}  // namespace rematlab
