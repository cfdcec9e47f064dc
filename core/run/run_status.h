// How a run ended (or that it has not yet): one enum for the trainer, the runs database, the CLI
// and the window, so no layer spells a status its own way.
#pragma once

#include <array>
#include <optional>
#include <string>

namespace rematlab {

enum class RunStatus {
  kRunning,      // recorded, not finished (the database only)
  kOk,           // every step ran
  kOom,          // a step did not fit the budget or the device
  kCancelled,    // stopped by the user
  kDiverged,     // the loss became NaN or infinite
  kFailed,       // the engine or the database failed; the message says why
  kInterrupted,  // the process recording it ended without finishing it
};

std::string to_string(RunStatus status);
std::optional<RunStatus> parse_run_status(const std::string& text);
// Every status, in the order above (for filters and menus).
const std::array<RunStatus, 7>& all_run_statuses();

// Whether the run trained all its steps: only such runs are measured through to the end.
inline bool finished_training(RunStatus status) { return status == RunStatus::kOk; }

}  // namespace rematlab
