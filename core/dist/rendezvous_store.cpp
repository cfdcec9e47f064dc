#include "dist/rendezvous_store.h"

#include <c10/util/Exception.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "common/errors.h"
#include "dist/dist_errors.h"

namespace rematlab::dist {
namespace {

bool mentions(const std::string& text, std::initializer_list<const char*> words) {
  for (const char* word : words) {
    if (text.find(word) != std::string::npos) return true;
  }
  return false;
}

c10::intrusive_ptr<c10d::Store> prefixed(const c10::intrusive_ptr<c10d::Store>& server,
                                         const std::string& agent_prefix) {
  c10::intrusive_ptr<c10d::Store> base = server;
  if (!agent_prefix.empty()) base = c10::make_intrusive<c10d::PrefixStore>(agent_prefix, base);
  return c10::make_intrusive<c10d::PrefixStore>("rematlab", base);
}

}  // namespace

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

RendezvousStore open_rendezvous_store(const DistEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = !env.agent_store && env.rank == 0;
  options.waitWorkers = false;  // the callers say which rank is missing
  options.timeout = timeout;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  RendezvousStore opened;
  try {
    opened.server = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const std::exception& error) {
    const std::string text = torch_error_text(error);
    if (options.isServer && mentions(text, {"EADDRINUSE", "already in use"})) {
      throw InvalidInput("MASTER_PORT", "port " + std::to_string(env.master_port) +
                                            " is already in use on this host; give the run a "
                                            "free one (MASTER_PORT, torchrun --master-port)");
    }
    if (options.isServer) {
      throw InvalidInput("MASTER_ADDR", "cannot serve the rendezvous on " + where + ": " + text);
    }
    throw PeerFailure("could not reach the rendezvous at " + where + " within " +
                      std::to_string((timeout.count() + 999) / 1000) +
                      " s (is rank 0 running, and is MASTER_ADDR its address?): " + text);
  }
  opened.store = prefixed(opened.server, env.agent_store ? env.store_prefix : "");
  return opened;
}

LauncherStore serve_launcher_store() {
  c10d::TCPStoreOptions options;
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;
  LauncherStore served;
  auto server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  served.port = server->getPort();
  served.store.server = server;
  served.store.store = prefixed(server, "/worker/attempt_0");
  return served;
}

}  // namespace rematlab::dist
