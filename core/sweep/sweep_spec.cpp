#include "sweep/sweep_spec.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "common/byte_size.h"
#include "common/errors.h"
#include "common/json_text.h"
#include "common/posix_files.h"
#include "model/hf_config.h"
#include "run/run_fields.h"
#include "sweep/max_batch.h"

namespace rematlab {
namespace {

const std::string kSpec = "spec: ";

int64_t positive_integer(const nlohmann::ordered_json& value, const std::string& field) {
  if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
    throw InvalidInput(field, "must be a positive integer, got " + brief_json(value));
  }
  return value.get<int64_t>();
}

MaxBatchSpec parse_max_batch(const nlohmann::ordered_json& object) {
  const std::string where = kSpec + "max_batch";
  if (!object.is_object()) throw InvalidInput(where, "must be an object with a budget");
  MaxBatchSpec spec;
  bool has_budget = false;
  for (const auto& item : object.items()) {
    const std::string field = where + "." + item.key();
    if (item.key() == "budget") {
      const auto& v = item.value();
      if (v.is_number_integer()) {
        spec.budget_bytes = v.get<int64_t>();
      } else if (v.is_string()) {
        spec.budget_bytes = parse_byte_size(v.get<std::string>(), field);
      } else {
        throw InvalidInput(field, "must be a size such as \"2GiB\", got " + brief_json(v));
      }
      if (spec.budget_bytes <= 0) throw InvalidInput(field, "must be positive");
      has_budget = true;
    } else if (item.key() == "limit") {
      spec.limit = positive_integer(item.value(), field);
    } else if (item.key() == "probe_steps") {
      spec.probe_steps = positive_integer(item.value(), field);
      check_probe_steps(spec.probe_steps, field);
    } else {
      throw InvalidInput(field, "unknown key (use budget, limit, probe_steps)");
    }
  }
  if (!has_budget) throw InvalidInput(where + ".budget", "is required");
  return spec;
}

// Validates a config; `blame` turns the run field at fault into the spec key to name.
template <typename Blame>
void validate_as(const RunConfig& config, const Blame& blame) {
  try {
    validate(config);
  } catch (const InvalidInput& error) {
    // Every field validate() names is a flag, hence a setting; anything else keeps its words.
    if (error.field().rfind("--", 0) != 0) {
      throw InvalidInput(blame(error.setting()), error.field() + " " + error.reason_words());
    }
    throw InvalidInput(blame(error.setting()), error.setting(), error.reason_words());
  }
  // Points are spread over workers (sweep --workers, torchrun, Slurm), but each point is
  // trained by one process: a point that is itself data parallel would need a group of workers.
  if (config.world_size > 1 || config.shard != "none") {
    throw InvalidInput(blame(config.world_size > 1 ? "world_size" : "shard"),
                       "each sweep point is trained by one process (sweep --workers spreads "
                       "the points, not a point); use run --nproc for data-parallel runs");
  }
}

// The warnings of each config.json the spec names, once per file given. A file that does not
// import is left to the expansion, which names its entry.
std::vector<std::string> model_config_warnings(const SweepSpec& spec) {
  std::vector<std::pair<std::string, nlohmann::json>> given;
  if (spec.base.contains("model_config")) {
    given.emplace_back(kSpec + "base.model_config", spec.base.at("model_config"));
  }
  for (const SweepAxis& axis : spec.axes) {
    if (axis.key != "model_config") continue;
    for (std::size_t i = 0; i < axis.values.size(); ++i) {
      given.emplace_back(kSpec + "axes.model_config[" + std::to_string(i) + "]", axis.values[i]);
    }
  }
  std::vector<std::string> warnings;
  for (const auto& [where, value] : given) {
    if (!value.is_string()) continue;
    try {
      for (const std::string& warning : import_hf_config(value.get<std::string>()).warnings) {
        warnings.push_back(where + ": " + warning);
      }
    } catch (const InvalidInput&) {
    }
  }
  return warnings;
}

// A relative model_config path in the spec read as one beside the spec file.
void resolve_model_configs(nlohmann::ordered_json& spec, const std::string& spec_path) {
  const std::filesystem::path folder = std::filesystem::path(spec_path).parent_path();
  auto resolve = [&](nlohmann::ordered_json& value) {
    if (!value.is_string()) return;
    const std::filesystem::path given = value.get<std::string>();
    if (given.is_relative() && !given.empty()) value = (folder / given).lexically_normal().string();
  };
  if (!spec.is_object()) return;
  if (spec.contains("base") && spec["base"].is_object() && spec["base"].contains("model_config")) {
    resolve(spec["base"]["model_config"]);
  }
  if (spec.contains("axes") && spec["axes"].is_object() && spec["axes"].contains("model_config") &&
      spec["axes"]["model_config"].is_array()) {
    for (auto& value : spec["axes"]["model_config"]) resolve(value);
  }
}

std::string value_label(const nlohmann::json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace

SweepSpec parse_sweep_spec(const nlohmann::ordered_json& json) {
  if (!json.is_object()) throw InvalidInput("spec", "must be a JSON object");
  SweepSpec spec;
  spec.source = json;
  for (const auto& item : json.items()) {
    const std::string& key = item.key();
    const auto& value = item.value();
    if (key == "name") {
      if (!value.is_string()) throw InvalidInput(kSpec + "name", "must be a string");
      spec.name = value.get<std::string>();
    } else if (key == "base") {
      if (!value.is_object()) throw InvalidInput(kSpec + "base", "must be an object of run fields");
      spec.base = value;
    } else if (key == "axes") {
      if (!value.is_object()) throw InvalidInput(kSpec + "axes", "must be an object of lists");
      for (const auto& axis : value.items()) {
        const std::string field = kSpec + "axes." + axis.key();
        if (!is_run_field(axis.key())) throw InvalidInput(field, "unknown run field");
        if (axis.key() == "preset") {
          throw InvalidInput(field,
                             "cannot be an axis (a preset resets the model shape); "
                             "sweep its fields instead");
        }
        if (!axis.value().is_array()) throw InvalidInput(field, "must be a list of values");
        if (axis.value().empty()) throw InvalidInput(field, "is empty: give at least one value");
        SweepAxis parsed{axis.key(), {}};
        for (const auto& v : axis.value()) parsed.values.emplace_back(v);
        spec.axes.push_back(std::move(parsed));
      }
    } else if (key == "max_batch") {
      spec.max_batch = parse_max_batch(value);
    } else if (key == "repeats") {
      spec.repeats = positive_integer(value, kSpec + "repeats");
    } else {
      throw InvalidInput(kSpec + key, "unknown key (use name, base, axes, max_batch, repeats)");
    }
  }
  if (spec.name.empty()) spec.name = "sweep";
  // Catch every error now, before anything runs.
  expand_sweep(spec);
  spec.warnings = model_config_warnings(spec);
  return spec;
}

SweepSpec load_sweep_spec(const std::string& path) {
  // A spec is a few KiB: a device, a pipe or a directory would block or read forever.
  const files::SmallFile file = files::read_small_file(path, int64_t{1} << 20);
  if (!file.error.empty())
    throw InvalidInput("--spec", "cannot read '" + path + "': " + file.error);
  nlohmann::ordered_json json;
  try {
    json = parse_ordered_json(file.text);
  } catch (const std::invalid_argument& error) {
    throw InvalidInput("--spec", "'" + path + "' is not valid JSON: " + error.what());
  }
  resolve_model_configs(json, path);
  return parse_sweep_spec(json);
}

int64_t count_sweep_points(const SweepSpec& spec) {
  int64_t count = spec.repeats;
  for (const SweepAxis& axis : spec.axes) {
    if (spec.max_batch && axis.key == "batch") continue;
    const auto values = static_cast<int64_t>(axis.values.size());
    // Saturates instead of overflowing: anything past the limit is refused all the same.
    count = count > kMaxSweepPoints / std::max<int64_t>(values, 1) ? kMaxSweepPoints + 1
                                                                   : count * values;
  }
  return count;
}

namespace {

// The axes a sweep expands: the max-batch search chooses the batch, so it replaces a batch axis.
std::vector<const SweepAxis*> expanded_axes(const SweepSpec& spec) {
  std::vector<const SweepAxis*> axes;
  for (const SweepAxis& axis : spec.axes) {
    if (!(spec.max_batch && axis.key == "batch")) axes.push_back(&axis);
  }
  return axes;
}

// The base as the point at `index` (one position per axis) sees it: each first-field axis
// (preset, arch, finetune) takes its value before the base's own fields apply, as one run's
// fields would, so that what the base sets explicitly (kv_heads, a LoRA rank) survives the
// family's or LoRA's defaults. An error from a value standing in the base names that axis entry.
RunConfig base_with_first_fields(const SweepSpec& spec, const std::vector<const SweepAxis*>& axes,
                                 const std::vector<std::size_t>& index) {
  nlohmann::ordered_json fields =
      spec.base.is_object() ? spec.base : nlohmann::ordered_json::object();
  for (std::size_t a = 0; a < axes.size(); ++a) {
    if (is_first_field(axes[a]->key)) {
      fields[axes[a]->key] = nlohmann::ordered_json::parse(axes[a]->values.at(index[a]).dump());
    }
  }
  try {
    return run_config_from_fields(fields, kSpec + "base");
  } catch (const InvalidInput& error) {
    for (std::size_t a = 0; a < axes.size(); ++a) {
      if (is_first_field(axes[a]->key) && error.field() == kSpec + "base." + axes[a]->key) {
        throw InvalidInput(kSpec + "axes." + axes[a]->key + "[" + std::to_string(index[a]) + "]",
                           error.reason());
      }
    }
    throw;
  }
}

bool has_first_field_axis(const std::vector<const SweepAxis*>& axes) {
  return std::any_of(axes.begin(), axes.end(),
                     [](const SweepAxis* axis) { return is_first_field(axis->key); });
}

// Each value on its own first, so an error names the exact entry.
void check_each_value(const SweepSpec& spec, const RunConfig& base,
                      const std::vector<const SweepAxis*>& axes) {
  for (std::size_t a = 0; a < axes.size(); ++a) {
    const SweepAxis* axis = axes[a];
    for (std::size_t i = 0; i < axis->values.size(); ++i) {
      const std::string field = kSpec + "axes." + axis->key + "[" + std::to_string(i) + "]";
      RunConfig alone = base;
      if (is_first_field(axis->key)) {
        std::vector<std::size_t> index(axes.size(), 0);
        index[a] = i;
        alone = base_with_first_fields(spec, axes, index);
      } else {
        apply_run_field(alone, axis->key, axis->values[i], field);
      }
      // Offload alone needs a policy that the checkpoint axis may supply.
      if (axis->key == "offload") alone.checkpoint = "every:1";
      if (axis->key == "checkpoint") alone.offload = "none";
      validate_as(alone, [&](const std::string& key) {
        return key == axis->key ? field : kSpec + "base." + key;
      });
    }
  }
}

// The point where each axis takes its value at `index`, named after the values it takes.
SweepPoint point_at(const SweepSpec& spec, const RunConfig& base,
                    const std::vector<const SweepAxis*>& axes,
                    const std::vector<std::size_t>& index) {
  SweepPoint point;
  point.config = has_first_field_axis(axes) ? base_with_first_fields(spec, axes, index) : base;
  for (std::size_t a = 0; a < axes.size(); ++a) {
    const nlohmann::json& value = axes[a]->values[index[a]];
    if (!is_first_field(axes[a]->key)) {
      apply_run_field(point.config, axes[a]->key, value, kSpec + "axes." + axes[a]->key);
    }
    point.label += (point.label.empty() ? "" : " ") + axes[a]->key + "=" + value_label(value);
  }
  if (spec.max_batch) {
    point.request.max_batch = spec.max_batch;
    point.config.budget_bytes = spec.max_batch->budget_bytes;
  }
  // A lone point is named after what it trains (its policy), not the experiment; a searched
  // batch is not known yet, so the name says it will be the largest that fits.
  if (point.label.empty()) point.label = point_legend(point);
  return point;
}

}  // namespace

std::string point_legend(const SweepPoint& point, int64_t found_batch) {
  std::string legend;
  if (!point.request.max_batch) {
    legend = describe_run(point.config);
  } else if (found_batch <= 0) {
    legend = describe_run(point.config, "b=max");
  } else {
    legend = describe_run(point.config, "b" + std::to_string(found_batch) + " (max)");
  }
  return point.repeat > 0 ? legend + " #" + std::to_string(point.repeat + 1) : legend;
}

std::vector<SweepPoint> expand_sweep(const SweepSpec& spec, std::vector<std::string>* skipped) {
  if (count_sweep_points(spec) > kMaxSweepPoints) {
    throw InvalidInput(kSpec + "axes", "the axes and repeats make more than " +
                                           std::to_string(kMaxSweepPoints) +
                                           " runs; split the sweep");
  }
  const std::vector<const SweepAxis*> axes = expanded_axes(spec);
  const RunConfig base =
      base_with_first_fields(spec, axes, std::vector<std::size_t>(axes.size(), 0));
  check_each_value(spec, base, axes);

  std::vector<SweepPoint> points;
  std::vector<std::size_t> index(axes.size(), 0);
  for (;;) {
    const SweepPoint point = point_at(spec, base, axes, index);
    // checkpoint × offload grids contain "none + offload", which has nothing to offload: it
    // is left out (and reported), not an error.
    if (point.config.checkpoint == "none" && point.config.offload != "none") {
      if (skipped) skipped->push_back(point.label + " (offload needs a checkpoint policy)");
    } else {
      validate_as(point.config, [&](const std::string& key) {
        for (const SweepAxis* axis : axes) {
          if (axis->key == key) return kSpec + "axes (" + point.label + ")";
        }
        return kSpec + "base." + key;
      });
      for (int64_t r = 0; r < spec.repeats; ++r) {
        points.push_back(point);
        points.back().repeat = r;
        if (spec.repeats > 1) points.back().label += " #" + std::to_string(r + 1);
      }
    }
    // Next combination, the last axis fastest.
    std::size_t a = axes.size();
    while (a > 0 && ++index[a - 1] == axes[a - 1]->values.size()) index[--a] = 0;
    if (a == 0) break;
  }
  if (points.empty()) throw InvalidInput(kSpec + "axes", "no combination of the axes can run");
  return points;
}

}  // namespace rematlab
