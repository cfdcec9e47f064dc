#include "store/run_recorder.h"

#include "store/run_writer.h"

namespace rematlab {

RunRecorder::RunRecorder(RunWriter* writer, std::optional<int64_t> experiment,
                         const std::string& name, const RunConfig& config,
                         const RunRequest& request, const std::optional<ProcessIdentity>& trainer)
    : writer_(writer) {
  if (writer_) id_ = writer_->begin_run(experiment, name, config, request, trainer);
}

RunRecorder RunRecorder::begun_elsewhere(RunWriter* writer, int64_t id) {
  RunRecorder recorder;
  recorder.writer_ = writer;
  recorder.id_ = id;
  return recorder;
}

void RunRecorder::add_step(const StepMetrics& step) const {
  if (writer_) writer_->add_step(*id_, step);
}

void RunRecorder::add_probe(int64_t index, int64_t batch, RunStatus status,
                            int64_t peak_bytes) const {
  if (writer_) writer_->add_probe(*id_, index, batch, status, peak_bytes);
}

void RunRecorder::finish(const RunSummary& summary) const {
  if (writer_) writer_->finish_run(*id_, summary);
}

void RunRecorder::fail(const std::string& reason) const {
  if (writer_) writer_->fail_run(*id_, reason);
}

void RunRecorder::end(RunStatus status, const std::string& message) const {
  if (writer_) writer_->end_run(*id_, status, message);
}

std::optional<int64_t> experiment_for(RunWriter& writer, const std::string& name,
                                      const nlohmann::json& spec) {
  if (name.empty()) return std::nullopt;
  return writer.create_experiment(name, spec);
}

}  // namespace rematlab
