// One run's record from its beginning to its end, the same for every path that trains one: the
// CLI's `run`, a rank of a data-parallel run, a sweep's point trained here or by a worker
// process. Begun with the run's name and config (status `running`), each step and probe added as
// it comes, ended once: finished with its summary, failed with an engine error's reason, or
// ended with a status forced on it (a process of it failed or was killed). Without a writer it
// records nothing, so a path that trains unrecorded needs no branch of its own.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/process_identity.h"
#include "run/run_config.h"
#include "run/run_request.h"
#include "run/run_status.h"
#include "run/run_summary.h"
#include "run/step_metrics.h"

namespace rematlab {

class RunWriter;

class RunRecorder {
 public:
  RunRecorder() = default;  // records nothing
  // Begins the run (run_writer.h: begin_run says what `trainer` is for).
  RunRecorder(RunWriter* writer, std::optional<int64_t> experiment, const std::string& name,
              const RunConfig& config, const RunRequest& request = {},
              const std::optional<ProcessIdentity>& trainer = std::nullopt);

  // A run another process began (rank 0 of a launch that then died): only ended here.
  static RunRecorder begun_elsewhere(RunWriter* writer, int64_t id);

  std::optional<int64_t> id() const { return id_; }

  void add_step(const StepMetrics& step) const;
  void add_probe(int64_t index, int64_t batch, RunStatus status, int64_t peak_bytes) const;
  // The run trained (ok, oom, cancelled or diverged): what it measured.
  void finish(const RunSummary& summary) const;
  // An engine error ended it: `failed`, with the reason.
  void fail(const std::string& reason) const;
  // It ended without a summary: a process of it failed or was killed (run_writer.h: end_run).
  void end(RunStatus status, const std::string& message) const;

 private:
  RunWriter* writer_ = nullptr;
  std::optional<int64_t> id_;
};

// The experiment a lone run is recorded under (`run --config`'s spec names one): created in
// `writer`, or none when `name` is empty.
std::optional<int64_t> experiment_for(RunWriter& writer, const std::string& name,
                                      const nlohmann::json& spec);

}  // namespace rematlab
