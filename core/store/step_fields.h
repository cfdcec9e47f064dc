// Every StepMetrics field once, by the name it has in the steps table, the CSV export and the
// JSON: the single list that inserting, reading and exporting steps go through.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "run/step_metrics.h"

namespace rematlab {

struct StepField {
  const char* name;
  std::variant<int64_t StepMetrics::*, double StepMetrics::*, bool StepMetrics::*> member;
};

const std::vector<StepField>& step_fields();

// The field's value as CSV/JSON text would show it (full precision for doubles).
std::string step_field_text(const StepMetrics& step, const StepField& field);

// Every field, exactly (non-finite doubles as "nan"/"inf"): how a sweep worker sends its steps
// to the process that records them. Reading ignores unknown keys and leaves missing ones at
// their defaults; a value of the wrong type throws std::invalid_argument naming the field.
nlohmann::json step_to_json(const StepMetrics& step);
StepMetrics step_from_json(const nlohmann::json& json);

}  // namespace rematlab
