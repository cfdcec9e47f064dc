#include "sweep/default_study.h"

namespace rematlab {

nlohmann::ordered_json default_study_spec() {
  // The article's four strategies on `small`: a few minutes on two cores. 384 MiB leaves the
  // baseline a handful of sequences, so the policies' gains show without costly large probes.
  return nlohmann::ordered_json::parse(R"({
    "name": "default study",
    "base": {"preset": "small", "steps": 3, "warmup_steps": 1},
    "axes": {"checkpoint": ["none", "every:1", "every:1+disk", "sublayer:1,2"]},
    "max_batch": {"budget": "384MiB", "limit": 64, "probe_steps": 2}
  })");
}

}  // namespace rematlab
