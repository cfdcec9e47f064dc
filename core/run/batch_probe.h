// One probe of a max-batch search: the batch tried, whether its training steps fit the budget
// (oom when not), their peak, and why it did not fit. The search's answer is the largest batch
// whose probe fit; every probe is kept with the run and shown with it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "run/run_status.h"

namespace rematlab {

struct BatchProbe {
  int64_t batch = 0;
  RunStatus status = RunStatus::kOk;  // kOom: did not fit
  int64_t peak_bytes = 0;
  std::string message;  // why it did not fit; not kept in the database
};

// {"batch", "status", "peak_bytes"}: what the CLI prints as a search's trials and the database
// keeps; the message is added only by those that carry it (a sweep worker's messages).
nlohmann::json to_json(const BatchProbe& probe);
// Throws std::invalid_argument (or nlohmann's errors) for what is no probe; "message" optional.
BatchProbe batch_probe_from_json(const nlohmann::json& json);

}  // namespace rematlab
