#include "parallel/dist_context.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "common/errors.h"
#include "parallel/dist_errors.h"
#include "parallel/rendezvous_store.h"

namespace rematlab::parallel {
namespace {

using Clock = std::chrono::steady_clock;

std::string seconds(std::chrono::milliseconds timeout) {
  return std::to_string((timeout.count() + 999) / 1000) + " s";
}

std::string short_message(const std::exception& error) { return torch_error_text(error); }

bool mentions(const std::string& text, std::initializer_list<const char*> words) {
  for (const char* word : words) {
    if (text.find(word) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

DistContext::DistContext(DistEnv env, c10::Device device, std::chrono::milliseconds timeout)
    : env_(std::move(env)), device_(device), timeout_(timeout) {}

DistContext::~DistContext() {
  if (!backend_ || !device_.is_cuda()) return;
  try {
    close_nccl_backend(*backend_);
  } catch (...) {
    // A communicator that cannot be aborted here is aborted by the backend's own destructor;
    // nothing more can be done while this context ends.
  }
}

std::shared_ptr<DistContext> DistContext::connect(const DistEnv& env, const c10::Device& device,
                                                  std::chrono::milliseconds timeout,
                                                  const std::atomic<bool>* cancel) {
  std::shared_ptr<DistContext> context(new DistContext(env, device, timeout));
  context->open_store(cancel);
  context->wait_for_everyone(cancel);
  context->create_backend();
  return context;
}

std::shared_ptr<DistContext> DistContext::subgroup(const std::string& name,
                                                   const std::vector<int>& ranks) {
  const auto me = std::find(ranks.begin(), ranks.end(), env_.rank);
  if (me == ranks.end()) throw std::logic_error("subgroup: this rank is not a member");
  DistEnv env = env_;
  env.rank = static_cast<int>(me - ranks.begin());
  env.world_size = static_cast<int>(ranks.size());
  std::shared_ptr<DistContext> group(new DistContext(env, device_, timeout_));
  group->server_ = server_;  // rank 0's store lives as long as any group uses it
  // A group made again (a second exchange in one process, as the tests make) must not meet the
  // keys the first rendezvous left: the members of a group count its uses alike. The members are
  // part of the key, so that one name for other ranks is another group.
  std::string key = name + "[";
  for (int member : ranks) key += std::to_string(member) + ",";
  key += "]";
  group->store_ = c10::make_intrusive<c10d::PrefixStore>(
      key + "#" + std::to_string(++subgroup_uses_[key]), store_);
  group->create_backend();
  return group;
}

std::string DistContext::backend_name() const { return device_.is_cuda() ? "nccl" : "gloo"; }

void DistContext::open_store(const std::atomic<bool>* cancel) {
  RendezvousStore opened = open_rendezvous_store(env_, timeout_, cancel);
  server_ = std::move(opened.server);
  store_ = std::move(opened.store);
}

// Every rank says how many ranks it was told there are: one started with another WORLD_SIZE
// would otherwise wait for ranks that never come, or join a group of the wrong size and fail
// inside the backend with its raw keys. Rank 0 reads everyone's, the others rank 0's.
void DistContext::check_world_sizes(std::vector<bool>& checked) {
  for (int rank = 0; rank < env_.world_size; ++rank) {
    if (checked[rank] || rank == env_.rank || (env_.rank != 0 && rank != 0)) continue;
    const std::string key = "world/" + std::to_string(rank);
    if (!store_->check({key})) continue;
    checked[rank] = true;
    const std::string theirs = store_->get_to_str(key);
    if (theirs == std::to_string(env_.world_size)) continue;
    throw InvalidInput("WORLD_SIZE", "rank " + std::to_string(rank) + " was started with " +
                                         theirs + " ranks, rank " + std::to_string(env_.rank) +
                                         " with " + std::to_string(env_.world_size) +
                                         "; start every rank with the same WORLD_SIZE "
                                         "(--nproc, torchrun --nproc-per-node, srun -n)");
  }
}

void DistContext::wait_for_everyone(const std::atomic<bool>* cancel) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::vector<bool> checked(static_cast<std::size_t>(env_.world_size), false);
  std::vector<std::string> keys;
  for (int rank = 0; rank < env_.world_size; ++rank)
    keys.push_back("joined/" + std::to_string(rank));
  const auto deadline = Clock::now() + timeout_;
  try {
    store_->set("world/" + std::to_string(env_.rank), std::to_string(env_.world_size));
    store_->set("joined/" + std::to_string(env_.rank),
                std::string(host) + " pid " + std::to_string(::getpid()));
    for (check_world_sizes(checked); !store_->check(keys); check_world_sizes(checked)) {
      stop_waiting_if_cancelled(cancel);
      if (Clock::now() > deadline) {
        std::string missing;
        for (int rank = 0; rank < env_.world_size; ++rank) {
          if (store_->check({keys[rank]})) continue;
          missing += (missing.empty() ? "" : ", ") + std::to_string(rank);
        }
        throw PeerFailure("rendezvous at " + env_.master_addr + ":" +
                          std::to_string(env_.master_port) + ": rank(s) " + missing + " of " +
                          std::to_string(env_.world_size) + " did not join within " +
                          seconds(timeout_) +
                          "; start every rank with the same WORLD_SIZE, MASTER_ADDR and "
                          "MASTER_PORT");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    check_world_sizes(checked);  // the last ones to join, too
  } catch (const PeerFailure&) {
    throw;
  } catch (const InvalidInput&) {
    throw;
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& error) {
    throw PeerFailure("the rendezvous store failed while ranks joined: " + short_message(error));
  }
}

void DistContext::create_backend() {
  try {
    if (device_.is_cuda()) {
      backend_ = make_nccl_backend(c10::make_intrusive<c10d::PrefixStore>("nccl", store_),
                                   env_.rank, env_.world_size, device_, timeout_);
      return;
    }
    auto options = c10d::ProcessGroupGloo::Options::create(timeout_);
    // Gloo binds to one interface; the default (the host name's address) is wrong on a single
    // host where the name resolves to an address other ranks cannot use, and GLOO_SOCKET_IFNAME
    // is only read by PyTorch's Python layer, so it is honoured here.
    if (is_loopback_address(env_.master_addr)) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME")) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("gloo", store_), env_.rank, env_.world_size,
        options);
  } catch (const InvalidInput&) {
    throw;
  } catch (const std::exception& error) {
    throw PeerFailure("connecting the " + backend_name() +
                      " backend failed: " + short_message(error));
  }
}

void DistContext::wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  try {
    work->wait();
  } catch (const std::exception& error) {
    const std::string text = short_message(error);
    std::string why;
    if (mentions(text, {"closed by peer", "Connection reset", "Broken pipe", "EOF"})) {
      why = "another rank closed its connection (it exited or died)";
    } else if (mentions(text, {"imed out", "imeout"})) {
      why = "no answer from another rank within " + seconds(timeout_) + " (it hung or died)";
    } else {
      why = "the group failed";
    }
    throw PeerFailure(std::string(what) + ": " + why + " [" + text + "]");
  }
  if (device_.is_cuda()) return;  // the caching allocator counts frees from any thread
  // Gloo's worker drops its reference just after completing the work's future.
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  while (work.use_count() > 1 && Clock::now() < deadline) std::this_thread::yield();
}

double DistContext::sum(double local) {
  std::vector<at::Tensor> value{
      torch::full({1}, local, torch::dtype(torch::kFloat64).device(device_))};
  wait(backend_->allreduce(value), "summing a value over ranks");
  return value[0].item<double>();
}

bool DistContext::any(bool local) { return sum(local ? 1.0 : 0.0) > 0.5; }

std::vector<double> DistContext::max(const std::vector<double>& local) {
  std::vector<at::Tensor> values{torch::tensor(local, torch::dtype(torch::kFloat64)).to(device_)};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  wait(backend_->allreduce(values, options), "taking the largest of values over ranks");
  const torch::Tensor result = values[0].cpu();
  return std::vector<double>(result.data_ptr<double>(), result.data_ptr<double>() + result.numel());
}

std::vector<std::string> DistContext::exchange(const std::string& key, const std::string& value) {
  std::vector<std::string> values;
  try {
    store_->set(key + "/" + std::to_string(env_.rank), value);
    for (int rank = 0; rank < env_.world_size; ++rank) {
      values.push_back(store_->get_to_str(key + "/" + std::to_string(rank)));
    }
  } catch (const std::exception& error) {
    throw PeerFailure("exchanging '" + key + "' between ranks: " + short_message(error));
  }
  return values;
}

}  // namespace rematlab::parallel
