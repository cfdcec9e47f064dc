// A sweep: base run fields, axes whose values multiply into runs, an optional max-batch search
// in place of the batch axis, and repeats (the design's "Sweep spec (JSON)").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "run/run_config.h"
#include "run/run_request.h"

namespace rematlab {

struct SweepAxis {
  std::string key;
  std::vector<nlohmann::json> values;
};

struct SweepSpec {
  std::string name;
  nlohmann::ordered_json base;
  std::vector<SweepAxis> axes;  // in the spec's order
  std::optional<MaxBatchSpec> max_batch;
  int64_t repeats = 1;
  // The spec as given (a relative model_config path resolved beside the spec file, so that
  // it names the same file wherever it is read again), kept with the experiment.
  nlohmann::ordered_json source;
  // What the spec's config.json files (model_config) hold that RematLab does not model, one line
  // each, named by where the file is given ("spec: axes.model_config[1]: …").
  std::vector<std::string> warnings;
};

// One run of the expanded sweep.
struct SweepPoint {
  RunConfig config;
  std::string label;  // the axis values that make it different, e.g. "checkpoint=every:2 batch=8"
  int64_t repeat = 0;
  RunRequest request;  // request.max_batch: config.batch is chosen by the max-batch search
};

// What a legend calls the point's run: policy, offload, batch, precision (describe_run), and
// its repeat. A searched batch is "b=max" until the search finds `found_batch`, then "b25 (max)".
std::string point_legend(const SweepPoint& point, int64_t found_batch = 0);

// Throws InvalidInput naming the key ("spec: axes.checkpoint[1]", "spec: repeats", …) for an
// unknown key, a wrong type, an empty axis or a value that does not validate.
SweepSpec parse_sweep_spec(const nlohmann::ordered_json& spec);
// Plus unreadable file / bad JSON. A relative model_config path is the spec file's neighbour.
SweepSpec load_sweep_spec(const std::string& path);

// More runs than this in one sweep is a mistake in the spec (a week of CPU at a minute per run).
inline constexpr int64_t kMaxSweepPoints = 10'000;
// How many runs the spec expands to (before leaving out none+offload), saturating past the limit.
int64_t count_sweep_points(const SweepSpec& spec);

// Every combination of axis values × repeats, each validated. Combinations of checkpoint `none`
// with an offload are left out and described in `skipped`.
std::vector<SweepPoint> expand_sweep(const SweepSpec& spec,
                                     std::vector<std::string>* skipped = nullptr);

}  // namespace rematlab
