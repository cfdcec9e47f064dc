// The rendezvous store (c10d's TCPStore) a distributed job meets at: opened as a rank sees it
// (rank 0 serves it, or every rank is a client of the store its launcher serves), or served by
// a launcher on a free port of this host, as torchrun's agent does.
//
// Who may talk to it: TCPStore has no authentication and, left to itself, listens on every
// interface. RematLab serves it only on the rendezvous address (127.0.0.1 for local launches,
// MASTER_ADDR's own address across hosts) and keeps every key under "rematlab/<secret>": the
// store cannot list its keys, so a process without the launch's secret can neither read what
// the ranks exchange nor set a failure or a result. A rank with another secret is refused.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "parallel/dist_env.h"

namespace rematlab::parallel {

// The store holds bytes; what we keep in it is text (JSON, numbers).
inline std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
inline std::string text_of(const std::vector<uint8_t>& bytes) {
  return {bytes.begin(), bytes.end()};
}

struct RendezvousStore {
  c10::intrusive_ptr<c10d::Store> server;  // the TCPStore itself (served here or a client)
  c10::intrusive_ptr<c10d::Store> store;   // under the job's prefixes: what everything uses
};

// As rank env.rank joins: throws InvalidInput (a port in use, an address it cannot serve on,
// another launch's secret), PeerFailure (the rendezvous cannot be reached, or does not answer,
// within `timeout`) or Interrupted (`cancel` was set while it waited).
RendezvousStore open_rendezvous_store(const DistEnv& env, std::chrono::milliseconds timeout,
                                      const std::atomic<bool>* cancel = nullptr);

// Throws Interrupted when `cancel` is set: a wait for other ranks heeds the user's stop.
void stop_waiting_if_cancelled(const std::atomic<bool>* cancel);

// Served here on a free port of 127.0.0.1, under the prefix a rank started with
// TORCHELASTIC_USE_AGENT_STORE=True and restart count 0 uses, with a fresh secret that the
// launcher hands to every process it starts.
struct LauncherStore {
  RendezvousStore store;
  int port = 0;
  std::string secret;
};
LauncherStore serve_launcher_store();

// A c10d or Gloo error's sentence, without the source location and the backtrace.
std::string torch_error_text(const std::exception& error);

}  // namespace rematlab::parallel
