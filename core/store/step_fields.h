// Every StepMetrics field once, by the name it has in the steps table, the CSV export and the
// JSON: the single list that inserting, reading and exporting steps go through.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "train/step_metrics.h"

namespace rematlab {

struct StepField {
  const char* name;
  std::variant<int64_t StepMetrics::*, double StepMetrics::*, bool StepMetrics::*> member;
};

const std::vector<StepField>& step_fields();

// The field's value as CSV/JSON text would show it (full precision for doubles).
std::string step_field_text(const StepMetrics& step, const StepField& field);

}  // namespace rematlab
