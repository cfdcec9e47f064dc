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

// Whether `key` is read before every other field (preset or model_config, arch, finetune): each
// resets fields (the shape, the family's defaults, LoRA's defaults) that fields given beside it
// then replace. `model_config` is a config.json's path (read as --model-config reads it).
bool is_first_field(const std::string& key);

// Sets one field; `where` prefixes the field name in errors (e.g. "axes.batch[2]").
// `preset` replaces the whole model shape, so apply it before the other model fields.
void apply_run_field(RunConfig& config, const std::string& key, const nlohmann::json& value,
                     const std::string& where);

// The first fields, then every other field; preset and model_config together are refused. Does
// not validate the result.
RunConfig run_config_from_fields(const nlohmann::ordered_json& fields, const std::string& where);

// What `unread` holds for a record whose config is not a JSON object at all (corrupt, or edited
// by hand): none of its fields could be read. Bracketed so that no field name reads like it.
inline constexpr const char* kUnreadWholeConfig = "(the whole config)";

// A RunConfig as the runs database stored it (to_json(RunConfig), which holds the shape, never a
// model_config: one in a record is unread, and no file it names is opened). Tolerant, because a
// record must stay readable: a field this build does not know or no longer accepts (a newer
// RematLab's, or a hand edit) keeps its default, and its name is added to `unread` (when given) so
// that what shows the run can say so rather than pass a default off as what the run trained with. A
// config that is not an object reads as the defaults with kUnreadWholeConfig in `unread`.
RunConfig run_config_from_record(const nlohmann::json& json,
                                 std::vector<std::string>* unread = nullptr);

// `unread`'s names for a message or a tooltip: the first 8, each cut to 64 bytes (at a character
// boundary, "…" after a cut) with control characters shown as '?', then "and N more".
// A record is outside input: a hand-edited name must not flood, or forge lines in, what says it.
std::string unread_fields_text(const std::vector<std::string>& unread);

}  // namespace rematlab
