// One rank's membership of a distributed run: the rendezvous store (c10d's TCPStore) and the
// collective backend (Gloo for CPU tensors, NCCL for CUDA ones), created together with clear
// errors for what goes wrong before training: a port in use, a rank that never joins, a
// rendezvous host that cannot be reached. Only c10d's API is used, never gloo's types.
#pragma once

#include <c10/core/Device.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "parallel/dist_env.h"

namespace rematlab::parallel {

inline constexpr std::chrono::seconds kDefaultTimeout{120};

class DistContext {
 public:
  // Joins the run `env` describes, with `device` the rank's compute device (CPU: Gloo; CUDA:
  // NCCL on that device). Every rank waits at most `timeout` for the others here, and later for
  // each collective. Throws InvalidInput (a port in use, bad addresses), PeerFailure (a rank
  // that did not join, an unreachable rendezvous) or Interrupted (`cancel` set while waiting).
  static std::shared_ptr<DistContext> connect(const DistEnv& env, const c10::Device& device,
                                              std::chrono::milliseconds timeout,
                                              const std::atomic<bool>* cancel = nullptr);
  ~DistContext();
  DistContext(const DistContext&) = delete;
  DistContext& operator=(const DistContext&) = delete;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const DistEnv& env() const { return env_; }
  const c10::Device& device() const { return device_; }  // where collective tensors live
  std::chrono::milliseconds timeout() const { return timeout_; }
  std::string backend_name() const;

  c10d::Backend& backend() { return *backend_; }
  c10d::Store& store() { return *store_; }

  // Waits for `work`, turning any failure of the group (a peer gone, the timeout) into a
  // PeerFailure that says what was being done. On Gloo it returns once the caller's reference
  // is the last one (the caller must hold exactly one), so that the collective and the tensors
  // it holds are freed on the caller's thread: the memory tracker counts frees only there.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what);

  // A group of some of this run's ranks (`ranks`, world ranks in the group's order) with a
  // backend of its own, on the same store under `name`. Only the members call it, each with the
  // same name and ranks, as often as the others; this rank must be one of them.
  std::shared_ptr<DistContext> subgroup(const std::string& name, const std::vector<int>& ranks);

  // Small collectives, blocking.
  double sum(double local);
  bool any(bool local);
  // Element by element, the largest over ranks; every rank passes as many values.
  std::vector<double> max(const std::vector<double>& local);

  // Every rank publishes `value` under `key`; returns all ranks' values, in rank order. Waits at
  // most the timeout for each.
  std::vector<std::string> exchange(const std::string& key, const std::string& value);

 private:
  DistContext(DistEnv env, c10::Device device, std::chrono::milliseconds timeout);
  void open_store(const std::atomic<bool>* cancel);
  void wait_for_everyone(const std::atomic<bool>* cancel);
  void check_world_sizes(std::vector<bool>& checked);
  void create_backend();

  DistEnv env_;
  c10::Device device_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> server_;  // the TCPStore itself (rank 0 unless agent store)
  c10::intrusive_ptr<c10d::Store> store_;   // what everything uses (prefixed)
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::map<std::string, int> subgroup_uses_;  // by name and members
};

// Creates the NCCL backend for `device` (CUDA builds; elsewhere throws InvalidInput("--device")).
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    const c10::Device& device,
                                                    std::chrono::milliseconds timeout);

// Aborts an NCCL backend's communicators before it is destroyed, which its destructor would
// otherwise do after warning that the process group was never destroyed (the H200 run).
void close_nccl_backend(c10d::Backend& backend);

}  // namespace rematlab::parallel
