// Where this process stands in a distributed run, read from the environment its launcher set:
// `rematlab-cli run --nproc N`, torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE) or Slurm's srun (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID, the allocation's first host as the rendezvous). No LibTorch here.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace rematlab::parallel {

inline constexpr int kDefaultMasterPort = 29500;

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // which of this host's GPUs the rank takes
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = kDefaultMasterPort;
  // Every rank is a client of a store its launcher already serves (torchrun's agent store, our
  // own launcher), under `store_prefix`; otherwise rank 0 serves it.
  bool agent_store = false;
  std::string store_prefix;
  std::string launcher = "none";  // "rematlab", "torchrun", "slurm" or "none"
  // Every rank runs on this host (LOCAL_WORLD_SIZE = WORLD_SIZE, or a one-node Slurm step): a
  // rendezvous on a loopback address is then reachable by all of them.
  bool single_host = true;
  // The launch's secret (REMATLAB_LAUNCH_SECRET): every key of the run lives under it, so a
  // process that does not know it can neither read nor change them. Required when the
  // rendezvous is not on this host's loopback address (anyone on the network can reach it);
  // our own launcher makes one for every launch.
  std::string secret;

  bool distributed() const { return world_size > 1; }
};

// Reads the variables through `lookup` (null when unset), so tests need no real environment.
// Throws InvalidInput naming the variable that is malformed or inconsistent.
using EnvLookup = std::function<const char*(const char*)>;
DistEnv dist_env_from(const EnvLookup& lookup);
DistEnv dist_env_from_process();

// Whether `address` names this host's loopback interface ("localhost", 127.x.x.x, ::1).
bool is_loopback_address(const std::string& address);

// The variable that carries a launch's secret, and a fresh one (128 random bits, hex).
inline constexpr const char* kSecretVariable = "REMATLAB_LAUNCH_SECRET";
std::string make_launch_secret();

// The first host of a Slurm hostlist: "node[07-09,12],gpu3" → "node07".
std::string first_slurm_host(const std::string& nodelist);

// Set by our launcher in every rank it starts, so a rank knows it may report its pid and
// expect the launcher to name a rank that dies.
inline constexpr const char* kLauncherVariable = "REMATLAB_LAUNCHER";

}  // namespace rematlab::parallel
