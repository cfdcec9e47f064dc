// A RunConfig from named fields, as a sweep spec's `base` and axes give them (the same names as
// to_json(RunConfig), plus `budget` as a size text). Errors name the field where it was found.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run/run_config.h"

namespace rematlab {

// Whether `key` names a run field.
bool is_run_field(const std::string& key);

// Whether `key` is read before every other field (preset, arch, finetune): each resets fields
// (the shape, the family's defaults, LoRA's defaults) that fields given beside it then replace.
bool is_first_field(const std::string& key);

// Sets one field; `where` prefixes the field name in errors (e.g. "axes.batch[2]").
// `preset` replaces the whole model shape, so apply it before the other model fields.
void apply_run_field(RunConfig& config, const std::string& key, const nlohmann::json& value,
                     const std::string& where);

// The preset first, then every other field. Does not validate the result.
RunConfig run_config_from_fields(const nlohmann::ordered_json& fields, const std::string& where);

// A RunConfig as the runs database stored it (to_json(RunConfig)). Tolerant, because a record
// must stay readable: a field this build does not know or no longer accepts keeps its default,
// and its name is added to `unread` (when given) so that what shows the run can say so rather
// than pass a default off as what the run trained with.
RunConfig run_config_from_record(const nlohmann::json& json,
                                 std::vector<std::string>* unread = nullptr);

}  // namespace rematlab
