#include "launch/rank_launch.h"

#include "common/errors.h"
#include "launch/local_launcher.h"
#include "parallel/dist_errors.h"
#include "run/run_config.h"
#include "runtime/device.h"
#include "store/run_recorder.h"
#include "store/run_writer.h"

namespace rematlab::launch {

void check_local_ranks(const std::string& device, int ranks, const std::string& ranks_field,
                       const std::string& device_field, const std::string& beyond) {
  if (ranks > max_threads()) {
    throw InvalidInput(ranks_field, std::to_string(ranks) +
                                        " ranks on this host is more than the limit of " +
                                        std::to_string(max_threads()) +
                                        " (4 per hardware thread, at least 16)" + beyond);
  }
  if (ranks <= 1 || !parse_device(device).is_cuda()) return;  // one rank runs where it is told
  if (device != "cuda")
    throw InvalidInput(device_field, kGpuPerRank + std::string(", not ") + device);
  try {
    parse_device("cuda:" + std::to_string(ranks - 1));
  } catch (const InvalidInput&) {
    throw InvalidInput(ranks_field, std::to_string(ranks) +
                                        " ranks take one GPU each, more than the CUDA devices "
                                        "of this host");
  }
}

RankLaunchOutcome launch_ranks(const RankLaunch& launch) {
  LocalLaunch local;
  static_cast<ProcessLaunch&>(local) = launch;
  const LaunchOutcome outcome = launch_local(local);
  if (!outcome.ok && (outcome.rank0_signalled || !outcome.named_while_rank0_alive) &&
      outcome.run_id && !launch.db.empty()) {
    // Rank 0 could not record its own end, or recorded it before anyone knew who failed. A
    // rank killed because it did not stop in time after Stop ends a cancelled run, not a
    // failed one.
    const parallel::ForcedEnd end =
        parallel::forced_end(outcome.killed_after_stop, outcome.failure);
    RunWriter writer(launch.db);
    RunRecorder::begun_elsewhere(&writer, *outcome.run_id).end(end.status, end.message);
  }
  return outcome;  // what the caller needs of it
}

}  // namespace rematlab::launch
