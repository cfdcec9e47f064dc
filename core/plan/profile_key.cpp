#include "plan/profile_key.h"

#include <ATen/Parallel.h>

#include "common/process_identity.h"
#include "compat/torch_compat.h"

namespace rematlab::plan {
namespace {

constexpr int kProfileMethod = 2;  // 2: piece times scaled to a whole step (time_scale)

}  // namespace

std::string profile_key(const RunConfig& config, int repeats) {
  nlohmann::json profiled = to_json(config);
  for (const char* unrelated :
       {"preset", "steps", "warmup_steps", "lr", "weight_decay", "seed", "checkpoint", "offload",
        "data", "budget_bytes", "timeline", "loss_scale", "loss_scale_growth_interval",
        "world_size", "shard", "bucket_bytes"}) {
    profiled.erase(unrelated);
  }
  // "LibTorch's default" is as many threads as this process gets: the number, not the default.
  if (profiled["threads"] == 0) profiled["threads"] = at::get_num_threads();
  // nlohmann's object keeps its keys sorted: one config, one text. `method` changes whenever
  // profile_chain measures otherwise, so that no kept profile of another method is reused.
  return nlohmann::json{{"method", kProfileMethod},
                        {"host", current_process().host},
                        {"libtorch", compat::torch_version()},
                        {"repeats", repeats},
                        {"config", profiled}}
      .dump();
}

}  // namespace rematlab::plan
