#include "dist/rank_launch.h"

#include "dist/local_launcher.h"
#include "store/run_writer.h"

namespace rematlab::dist {

RankLaunchOutcome launch_ranks(const RankLaunch& launch) {
  LocalLaunch local;
  local.nproc = launch.nproc;
  local.args = launch.args;
  local.grace = launch.grace;
  local.cancel = launch.cancel;
  local.on_rank_step = launch.on_rank_step;
  const LaunchOutcome outcome = launch_local(local);
  if (!outcome.ok && (outcome.rank0_signalled || !outcome.named_while_rank0_alive) &&
      outcome.run_id && !launch.db.empty()) {
    // Rank 0 could not record its own end, or recorded it before anyone knew who failed.
    RunWriter writer(launch.db);
    writer.fail_run(*outcome.run_id, outcome.failure);
  }
  RankLaunchOutcome result;
  result.ok = outcome.ok;
  result.failure = outcome.failure;
  result.failed_by_signal = outcome.failed_by_signal;
  result.failed_exit_code = outcome.failed_exit_code;
  result.run_id = outcome.run_id;
  return result;
}

}  // namespace rematlab::dist
