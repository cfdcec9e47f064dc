#include "run/run_status.h"

namespace rematlab {

const std::array<RunStatus, 7>& all_run_statuses() {
  static const std::array<RunStatus, 7> kAll = {
      RunStatus::kRunning,  RunStatus::kOk,     RunStatus::kOom,        RunStatus::kCancelled,
      RunStatus::kDiverged, RunStatus::kFailed, RunStatus::kInterrupted};
  return kAll;
}

std::string to_string(RunStatus status) {
  switch (status) {
    case RunStatus::kRunning:
      return "running";
    case RunStatus::kOk:
      return "ok";
    case RunStatus::kOom:
      return "oom";
    case RunStatus::kCancelled:
      return "cancelled";
    case RunStatus::kDiverged:
      return "diverged";
    case RunStatus::kFailed:
      return "failed";
    case RunStatus::kInterrupted:
      return "interrupted";
  }
  return "failed";
}

std::optional<RunStatus> parse_run_status(const std::string& text) {
  for (RunStatus status : all_run_statuses()) {
    if (to_string(status) == text) return status;
  }
  return std::nullopt;
}

}  // namespace rematlab
