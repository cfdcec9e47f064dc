#include "plan/profile_key.h"

#include "common/process_identity.h"
#include "compat/torch_compat.h"

namespace rematlab::plan {

std::string profile_key(const RunConfig& config, int repeats) {
  nlohmann::json profiled = to_json(config);
  for (const char* unrelated :
       {"preset", "steps", "warmup_steps", "lr", "weight_decay", "seed", "checkpoint", "offload",
        "data", "budget_bytes", "timeline", "loss_scale", "loss_scale_growth_interval",
        "world_size", "shard", "bucket_bytes"}) {
    profiled.erase(unrelated);
  }
  // nlohmann's object keeps its keys sorted: one config, one text.
  return nlohmann::json{{"host", current_process().host},
                        {"libtorch", compat::torch_version()},
                        {"repeats", repeats},
                        {"config", profiled}}
      .dump();
}

}  // namespace rematlab::plan
