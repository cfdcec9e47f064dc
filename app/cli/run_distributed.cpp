#include "cli/run_distributed.h"

#include <unistd.h>

#include <fstream>
#include <iostream>
#include <stdexcept>

#include "launch/rank_launch.h"
#include "parallel/dist_errors.h"
#include "store/run_store.h"

namespace rematlab::cli {

std::vector<std::string> own_command_line_without(const std::string& flag) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  std::vector<std::string> kept;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag) {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind(flag + "=", 0) == 0) continue;
    kept.push_back(args[i]);
  }
  char exe[4096] = {};
  const ssize_t length = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (kept.empty() || length <= 0) throw std::runtime_error("cannot read this command's own line");
  kept.front() = std::string(exe, static_cast<std::size_t>(length));
  return kept;
}

int launch_local_ranks(const RunConfig& config, const launch::RankRunOptions& options,
                       const std::atomic<bool>& cancel) {
  // Refused here, before any rank starts, as a single run would refuse it.
  launch::check_local_ranks(config.device, static_cast<int>(config.world_size), "--nproc",
                            "--device", "; use torchrun or srun across hosts");
  if (!options.db.empty()) check_database_path(options.db);  // rank 0 creates it
  launch::RankLaunch launch;
  launch.nproc = static_cast<int>(config.world_size);
  launch.args = own_command_line_without("--nproc");
  // A rank notices a dead peer at once and a hung one after the timeout; then it needs a moment
  // to record the failure.
  launch.grace = options.timeout + std::chrono::seconds(5);
  launch.cancel = &cancel;
  launch.db = options.db;
  const launch::RankLaunchOutcome outcome = launch::launch_ranks(launch);
  if (outcome.ok && outcome.stopped_before_start && !outcome.run_id) {
    std::cerr << "rematlab-cli: stopped before the ranks began training; nothing was recorded"
              << std::endl;
    return parallel::kExitInterrupted;
  }
  if (outcome.ok) return 0;
  if (!outcome.failed_by_signal && outcome.failed_exit_code == 2) return 2;  // its line is above
  std::cerr << "rematlab-cli: error: " << outcome.failure << std::endl;
  return 1;
}

}  // namespace rematlab::cli
