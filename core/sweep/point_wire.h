// A sweep point's outcome as JSON, exactly: what a sweep worker sends to the one process that
// records the sweep (core/launch/sweep_coordinator.h). Steps travel on their own as they happen
// (store/step_fields.h), so the summary here carries none.
#pragma once

#include <nlohmann/json.hpp>

#include "sweep/point_runner.h"

namespace rematlab {

nlohmann::json to_json(const PointOutcome& outcome);
// Throws std::invalid_argument (or nlohmann's type_error) for a message that is not one.
PointOutcome point_outcome_from_json(const nlohmann::json& json);

// A probe with its message, which the worker's record of it needs (run/batch_probe.h reads it).
nlohmann::json probe_on_the_wire(const BatchProbe& probe);

}  // namespace rematlab
