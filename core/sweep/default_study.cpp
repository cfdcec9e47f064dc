#include "sweep/default_study.h"

namespace rematlab {

nlohmann::ordered_json default_study_spec() {
  // `small` keeps it to a few minutes on two cores; 1 GiB makes the baseline's max batch small
  // enough that the policies' gains show.
  return nlohmann::ordered_json::parse(R"({
    "name": "default study",
    "base": {"preset": "small", "steps": 3, "warmup_steps": 1},
    "axes": {"checkpoint": ["none", "every:1", "sublayer:1,2"], "offload": ["none", "disk"]},
    "max_batch": {"budget": "1GiB", "limit": 64, "probe_steps": 2}
  })");
}

}  // namespace rematlab
