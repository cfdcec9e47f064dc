// How a distributed run fails. A PeerFailure means that this rank is healthy but the group is
// not: another rank died, hung past the timeout, or the network between them broke. The CLI
// exits with kExitPeerFailed for it, so a launcher can tell the rank that failed first from the
// ranks that stopped because of it.
#pragma once

#include <stdexcept>
#include <string>

namespace rematlab::dist {

class PeerFailure : public std::runtime_error {
 public:
  explicit PeerFailure(const std::string& what) : std::runtime_error(what) {}
};

// Exit code of a rank that stopped because another one failed (see docs/distributed.md).
inline constexpr int kExitPeerFailed = 4;

}  // namespace rematlab::dist
