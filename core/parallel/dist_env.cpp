#include "parallel/dist_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "common/errors.h"
#include "run/run_config.h"

namespace rematlab::parallel {
namespace {

// A whole decimal number in [low, high] or InvalidInput naming the variable.
int read_int(const EnvLookup& lookup, const char* name, int low, int high) {
  const char* value = lookup(name);
  const std::string text = value ? value : "";
  int number = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, number);
  if (text.empty() || error != std::errc() || stop != end) {
    throw InvalidInput(name, "'" + text + "' is not a whole number");
  }
  if (number < low || number > high) {
    throw InvalidInput(name, std::to_string(number) + " is outside [" + std::to_string(low) + ", " +
                                 std::to_string(high) + "]");
  }
  return number;
}

bool is_set(const EnvLookup& lookup, const char* name) {
  const char* value = lookup(name);
  return value && *value;
}

std::string text_or(const EnvLookup& lookup, const char* name, const std::string& fallback) {
  return is_set(lookup, name) ? std::string(lookup(name)) : fallback;
}

void read_master(const EnvLookup& lookup, DistEnv& env, const std::string& default_addr,
                 int default_port) {
  env.master_addr = text_or(lookup, "MASTER_ADDR", default_addr);
  env.master_port =
      is_set(lookup, "MASTER_PORT") ? read_int(lookup, "MASTER_PORT", 1, 65535) : default_port;
}

// A secret that is given must be one a person could not guess and that fits in a store key.
void read_secret(const EnvLookup& lookup, DistEnv& env) {
  env.secret = text_or(lookup, kSecretVariable, "");
  const bool well_formed = std::all_of(env.secret.begin(), env.secret.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
  if (!env.secret.empty() && (env.secret.size() < 16 || env.secret.size() > 256 || !well_formed)) {
    throw InvalidInput(kSecretVariable,
                       "must be 16 to 256 letters, digits, '-' or '_' (e.g. the output of "
                       "`openssl rand -hex 16`)");
  }
  if (env.secret.empty() && !is_loopback_address(env.master_addr)) {
    throw InvalidInput(kSecretVariable,
                       "the rendezvous " + env.master_addr +
                           " is reachable from other hosts: give every rank the same secret, "
                           "e.g. export REMATLAB_LAUNCH_SECRET=$(openssl rand -hex 16) before "
                           "torchrun or srun");
  }
}

DistEnv from_rank_variables(const EnvLookup& lookup) {
  if (!is_set(lookup, "WORLD_SIZE")) throw InvalidInput("WORLD_SIZE", "RANK is set but not it");
  if (!is_set(lookup, "RANK")) throw InvalidInput("RANK", "WORLD_SIZE is set but not it");
  DistEnv env;
  env.world_size = read_int(lookup, "WORLD_SIZE", 1, kMaxWorldSize);
  env.rank = read_int(lookup, "RANK", 0, env.world_size - 1);
  env.local_world_size = is_set(lookup, "LOCAL_WORLD_SIZE")
                             ? read_int(lookup, "LOCAL_WORLD_SIZE", 1, env.world_size)
                             : env.world_size;
  env.local_rank = is_set(lookup, "LOCAL_RANK")
                       ? read_int(lookup, "LOCAL_RANK", 0, env.local_world_size - 1)
                       : env.rank % env.local_world_size;
  env.single_host = env.local_world_size == env.world_size;
  read_master(lookup, env, "127.0.0.1", kDefaultMasterPort);
  // torchrun serves the store itself and every worker is a client of it, under a prefix per
  // restart of the job.
  env.agent_store = text_or(lookup, "TORCHELASTIC_USE_AGENT_STORE", "") == "True";
  if (env.agent_store) {
    const int restart = is_set(lookup, "TORCHELASTIC_RESTART_COUNT")
                            ? read_int(lookup, "TORCHELASTIC_RESTART_COUNT", 0, 1 << 20)
                            : 0;
    env.store_prefix = "/worker/attempt_" + std::to_string(restart);
  }
  env.launcher =
      is_set(lookup, kLauncherVariable) ? "rematlab"
      : is_set(lookup, "TORCHELASTIC_RUN_ID") || is_set(lookup, "TORCHELASTIC_RESTART_COUNT")
          ? "torchrun"
          : "environment";
  read_secret(lookup, env);
  return env;
}

DistEnv from_slurm(const EnvLookup& lookup) {
  DistEnv env;
  env.launcher = "slurm";
  env.world_size = read_int(lookup, "SLURM_NTASKS", 1, kMaxWorldSize);
  env.rank = read_int(lookup, "SLURM_PROCID", 0, env.world_size - 1);
  env.local_rank =
      is_set(lookup, "SLURM_LOCALID") ? read_int(lookup, "SLURM_LOCALID", 0, kMaxWorldSize) : 0;
  env.local_world_size = env.world_size;
  const char* nodes_in_step = is_set(lookup, "SLURM_STEP_NUM_NODES")
                                  ? lookup("SLURM_STEP_NUM_NODES")
                                  : lookup("SLURM_NNODES");
  env.single_host = nodes_in_step && std::string(nodes_in_step) == "1";
  const std::string nodes =
      text_or(lookup, "SLURM_STEP_NODELIST", text_or(lookup, "SLURM_JOB_NODELIST", "127.0.0.1"));
  // A port derived from the job id, so two jobs sharing a first node do not collide.
  const int job = is_set(lookup, "SLURM_JOB_ID")
                      ? read_int(lookup, "SLURM_JOB_ID", 0, std::numeric_limits<int>::max())
                      : 0;
  read_master(lookup, env, first_slurm_host(nodes), 20000 + job % 20000);
  read_secret(lookup, env);
  return env;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  std::size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  const std::string entry = nodelist.substr(0, end);
  const std::size_t open = entry.find('[');
  if (open == std::string::npos) return entry;
  const std::size_t close = entry.find(']', open);
  if (close == std::string::npos) return entry;
  const std::string ranges = entry.substr(open + 1, close - open - 1);
  const std::string first = ranges.substr(0, ranges.find_first_of(",-"));
  return entry.substr(0, open) + first + entry.substr(close + 1);
}

bool is_loopback_address(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

std::string make_launch_secret() {
  unsigned char bytes[16];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  const bool read_all = fd >= 0 && ::read(fd, bytes, sizeof bytes) == sizeof bytes;
  if (fd >= 0) ::close(fd);
  if (!read_all) throw std::runtime_error("cannot read /dev/urandom for a launch secret");
  static const char kHex[] = "0123456789abcdef";
  std::string secret;
  for (const unsigned char byte : bytes) {
    secret += kHex[byte >> 4];
    secret += kHex[byte & 15];
  }
  return secret;
}

DistEnv dist_env_from(const EnvLookup& lookup) {
  if (is_set(lookup, "RANK") || is_set(lookup, "WORLD_SIZE")) return from_rank_variables(lookup);
  if (is_set(lookup, "SLURM_PROCID") && is_set(lookup, "SLURM_NTASKS")) return from_slurm(lookup);
  return DistEnv{};
}

DistEnv dist_env_from_process() {
  return dist_env_from([](const char* name) { return std::getenv(name); });
}

}  // namespace rematlab::parallel
