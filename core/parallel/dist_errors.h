// How a distributed run fails. A PeerFailure means that this rank is healthy but the group is
// not: another rank died, hung past the timeout, or the network between them broke. The CLI
// exits with kExitPeerFailed for it, so a launcher can tell the rank that failed first from the
// ranks that stopped because of it.
#pragma once

#include <stdexcept>
#include <string>

#include "run/run_status.h"

namespace rematlab::parallel {

class PeerFailure : public std::runtime_error {
 public:
  explicit PeerFailure(const std::string& what) : std::runtime_error(what) {}
};

// Exit code of a rank that stopped because another one failed (see docs/distributed.md).
inline constexpr int kExitPeerFailed = 4;
// Exit code of a process stopped by the user before it had a result (rematlab-cli's Interrupted).
inline constexpr int kExitInterrupted = 130;

// How a run or sweep point ends that could not record its own end (a process of it was killed,
// lost, or stopped by a peer): cancelled when the user's stop caused that, else failed; the
// message says which.
struct ForcedEnd {
  RunStatus status;
  std::string message;
};
inline ForcedEnd forced_end(bool caused_by_stop, const std::string& why) {
  if (caused_by_stop) return {RunStatus::kCancelled, "stopped by the user; " + why};
  return {RunStatus::kFailed, why};
}

}  // namespace rematlab::parallel
