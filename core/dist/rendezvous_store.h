// The rendezvous store (c10d's TCPStore) a distributed job meets at: opened as a rank sees it
// (rank 0 serves it, or every rank is a client of the store its launcher serves), or served by
// a launcher on a free port of this host, as torchrun's agent does. Everything RematLab keeps
// there sits under the "rematlab" prefix.
#pragma once

#include <chrono>
#include <exception>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dist/dist_env.h"

namespace rematlab::dist {

struct RendezvousStore {
  c10::intrusive_ptr<c10d::Store> server;  // the TCPStore itself (served here or a client)
  c10::intrusive_ptr<c10d::Store> store;   // under the job's prefixes: what everything uses
};

// As rank env.rank joins: throws InvalidInput (a port in use, an address it cannot serve on) or
// PeerFailure (the rendezvous cannot be reached within `timeout`).
RendezvousStore open_rendezvous_store(const DistEnv& env, std::chrono::milliseconds timeout);

// Served here on a free port of 127.0.0.1, under the prefix a rank started with
// TORCHELASTIC_USE_AGENT_STORE=True and restart count 0 uses.
struct LauncherStore {
  RendezvousStore store;
  int port = 0;
};
LauncherStore serve_launcher_store();

// A c10d or Gloo error's sentence, without the source location and the backtrace.
std::string torch_error_text(const std::exception& error);

}  // namespace rematlab::dist
