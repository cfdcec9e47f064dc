#include "parallel/rendezvous_store.h"

#include <c10/util/Exception.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "common/errors.h"
#include "parallel/dist_errors.h"

namespace rematlab::parallel {
namespace {

using Clock = std::chrono::steady_clock;

// Set by whoever serves the launch (the launcher, or rank 0) once the store is up: the public
// marker first under the agent's prefix, the secret one under the launch's prefix before it.
constexpr const char* kLaunchMarker = "rematlab-launch";
constexpr const char* kOpenKey = "open";

c10::intrusive_ptr<c10d::Store> agent_base(const c10::intrusive_ptr<c10d::Store>& server,
                                           const std::string& agent_prefix) {
  if (agent_prefix.empty()) return server;
  return c10::make_intrusive<c10d::PrefixStore>(agent_prefix, server);
}

c10::intrusive_ptr<c10d::Store> launch_store(const c10::intrusive_ptr<c10d::Store>& base,
                                             const std::string& secret) {
  return c10::make_intrusive<c10d::PrefixStore>(
      secret.empty() ? std::string("rematlab") : "rematlab/" + secret, base);
}

void mark_launch(c10d::Store& base, c10d::Store& launch) {
  launch.set(kOpenKey, std::string("1"));
  base.set(kLaunchMarker, std::string("1"));
}

bool is_loopback(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in&>(address).sin_addr.s_addr) >> 24) == 127;
  }
  const in6_addr& ip6 = reinterpret_cast<const sockaddr_in6&>(address).sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(&ip6) || (IN6_IS_ADDR_V4MAPPED(&ip6) && ip6.s6_addr[12] == 127);
}

// A listening socket bound to `address` only (TCPStore alone would bind every interface), on
// `port` (0: a free one). Returns the descriptor, which TCPStore then owns. `reachable_by_all`:
// ranks on other hosts must reach it, which an address that resolves to loopback here (Debian
// maps a host's own name to 127.0.1.1) would not allow.
int listen_on(const std::string& address, int port, const std::string& where,
              bool reachable_by_all = false) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string host = address == "localhost" ? "127.0.0.1" : address;
  const int resolved = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (resolved != 0 || !found) {
    throw InvalidInput("MASTER_ADDR",
                       "cannot serve the rendezvous on " + where + ": " + ::gai_strerror(resolved));
  }
  sockaddr_storage bound{};
  std::memcpy(&bound, found->ai_addr, found->ai_addrlen);
  const socklen_t length = found->ai_addrlen;
  const int family = found->ai_family;
  ::freeaddrinfo(found);
  // A loopback address given as such (127.0.0.1) is taken as meant; a name that turns out to be
  // one here is the mistake this catches.
  const bool numeric = address.find_first_not_of("0123456789.:") == std::string::npos;
  if (reachable_by_all && is_loopback(bound) && !numeric) {
    throw InvalidInput("MASTER_ADDR", "'" + address +
                                          "' resolves to a loopback address on this host, which "
                                          "ranks on other hosts cannot reach; give MASTER_ADDR "
                                          "this host's network address");
  }
  if (family == AF_INET) {
    reinterpret_cast<sockaddr_in&>(bound).sin_port = htons(static_cast<std::uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in6&>(bound).sin6_port = htons(static_cast<std::uint16_t>(port));
  }
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    throw InvalidInput("MASTER_ADDR",
                       "cannot serve the rendezvous on " + where + ": " + std::strerror(errno));
  }
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&bound), length) != 0 ||
      ::listen(fd, SOMAXCONN) != 0) {
    const int reason = errno;
    ::close(fd);
    if (reason == EADDRINUSE) {
      throw InvalidInput("MASTER_PORT", "port " + std::to_string(port) +
                                            " is already in use on this host; give the run a "
                                            "free one (MASTER_PORT, torchrun --master-port)");
    }
    throw InvalidInput("MASTER_ADDR",
                       "cannot serve the rendezvous on " + where + ": " + std::strerror(reason));
  }
  return fd;
}

int bound_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return ntohs(address.ss_family == AF_INET
                   ? reinterpret_cast<const sockaddr_in&>(address).sin_port
                   : reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
}

// A client's connection. TCPStore's constructor connects, then asks the server to answer; a
// peer that accepts and never answers would hold it well past `timeout`, so it runs on a thread
// of its own and is abandoned (the rank then exits) when the deadline passes.
c10::intrusive_ptr<c10d::Store> connect_client(const DistEnv& env,
                                               const c10d::TCPStoreOptions& options,
                                               const std::string& where,
                                               const std::atomic<bool>* cancel) {
  struct Attempt {
    std::mutex mutex;
    std::condition_variable done;
    bool finished = false;
    c10::intrusive_ptr<c10d::Store> store;
    std::string error;
  };
  auto attempt = std::make_shared<Attempt>();
  std::thread([attempt, address = env.master_addr, options] {
    c10::intrusive_ptr<c10d::Store> store;
    std::string error;
    try {
      store = c10::make_intrusive<c10d::TCPStore>(address, options);
    } catch (const std::exception& failure) {
      error = torch_error_text(failure);
      if (error.empty()) error = "no answer";
    }
    std::lock_guard<std::mutex> lock(attempt->mutex);
    attempt->store = std::move(store);
    attempt->error = std::move(error);
    attempt->finished = true;
    attempt->done.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(attempt->mutex);
  const std::string within = std::to_string((options.timeout.count() + 999) / 1000) + " s";
  const auto deadline = Clock::now() + options.timeout;
  while (!attempt->finished && Clock::now() < deadline) {
    attempt->done.wait_for(lock, std::chrono::milliseconds(100));
    lock.unlock();
    stop_waiting_if_cancelled(cancel);
    lock.lock();
  }
  if (!attempt->finished) {
    throw PeerFailure("the rendezvous at " + where + " did not answer within " + within +
                      " (is MASTER_ADDR:MASTER_PORT a RematLab or torchrun rendezvous?)");
  }
  if (!attempt->error.empty()) {
    throw PeerFailure("could not reach the rendezvous at " + where + " within " + within +
                      " (is rank 0 running, and is MASTER_ADDR its address?): " + attempt->error);
  }
  return attempt->store;
}

// As a client: waits for the launch's marker, then checks that this rank's secret is the
// launch's (a rank with another one sees the marker but not its own key).
void check_launch_secret(c10d::Store& base, c10d::Store& launch, const std::string& where,
                         std::chrono::milliseconds timeout, const std::atomic<bool>* cancel) {
  const auto deadline = Clock::now() + timeout;
  try {
    while (!base.check({kLaunchMarker})) {
      stop_waiting_if_cancelled(cancel);
      if (Clock::now() > deadline) {
        throw PeerFailure("rendezvous at " + where + ": rank 0 did not open the launch within " +
                          std::to_string((timeout.count() + 999) / 1000) + " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!launch.check({kOpenKey})) {
      throw InvalidInput(kSecretVariable,
                         "the rendezvous at " + where +
                             " belongs to a launch with another secret; give every rank the "
                             "same REMATLAB_LAUNCH_SECRET");
    }
  } catch (const InvalidInput&) {
    throw;
  } catch (const PeerFailure&) {
    throw;
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& error) {
    throw PeerFailure("the rendezvous at " + where + " failed: " + torch_error_text(error));
  }
}

}  // namespace

void stop_waiting_if_cancelled(const std::atomic<bool>* cancel) {
  if (cancel && cancel->load()) {
    throw Interrupted("stopped while waiting for the other ranks; nothing was recorded");
  }
}

std::string torch_error_text(const std::exception& error) {
  std::string text = error.what();
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&error)) {
    text = torch_error->what_without_backtrace();
  }
  // Gloo and c10d prefix their messages with a source location ("[…/pair.cc:547] …") and append
  // a backtrace; keep the sentence.
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find("] ");
    if (close != std::string::npos) text = text.substr(close + 2);
  }
  const auto newline = text.find('\n');
  if (newline != std::string::npos) text = text.substr(0, newline);
  return text;
}

RendezvousStore open_rendezvous_store(const DistEnv& env, std::chrono::milliseconds timeout,
                                      const std::atomic<bool>* cancel) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = !env.agent_store && env.rank == 0;
  options.waitWorkers = false;  // the callers say which rank is missing
  options.timeout = timeout;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  RendezvousStore opened;
  if (options.isServer) {
    options.masterListenFd = listen_on(env.master_addr, env.master_port, where, !env.single_host);
    try {
      opened.server = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    } catch (const std::exception& error) {
      throw InvalidInput("MASTER_ADDR", "cannot serve the rendezvous on " + where + ": " +
                                            torch_error_text(error));
    }
  } else {
    opened.server = connect_client(env, options, where, cancel);
  }
  const c10::intrusive_ptr<c10d::Store> base =
      agent_base(opened.server, env.agent_store ? env.store_prefix : "");
  opened.store = launch_store(base, env.secret);
  try {
    if (env.rank == 0) mark_launch(*base, *opened.store);
  } catch (const std::exception& error) {
    throw PeerFailure("the rendezvous at " + where + " failed: " + torch_error_text(error));
  }
  if (env.rank != 0) check_launch_secret(*base, *opened.store, where, timeout, cancel);
  return opened;
}

LauncherStore serve_launcher_store() {
  LauncherStore served;
  served.secret = make_launch_secret();
  c10d::TCPStoreOptions options;
  options.isServer = true;
  options.waitWorkers = false;
  const int fd = listen_on("127.0.0.1", 0, "127.0.0.1");
  served.port = bound_port(fd);
  options.port = static_cast<std::uint16_t>(served.port);
  options.masterListenFd = fd;
  auto server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  served.store.server = server;
  const c10::intrusive_ptr<c10d::Store> base = agent_base(server, "/worker/attempt_0");
  served.store.store = launch_store(base, served.secret);
  mark_launch(*base, *served.store.store);
  return served;
}

}  // namespace rematlab::parallel
