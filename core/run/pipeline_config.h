// A run's pipeline settings: --pp, --virtual-stages and --pp-split checked against the model,
// the micro-batches, the ranks and the checkpoint policy (RunConfig's validate asks), and
// --pp-split read from its text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "run/run_config.h"

namespace rematlab {

// Every chunk needs a block, 1F1B a micro-batch per stage at least and the interleaved schedule
// rounds of them; a stages: policy and a split give one entry for each chunk; what pipelines
// cannot combine with yet is refused. Throws InvalidInput naming the flag.
void validate_pipeline(const RunConfig& config);

// "3,5": the blocks of each pipeline chunk (RunConfig::pp_split), positive whole numbers separated
// by commas; "" is none (the rule's split). Throws InvalidInput("--pp-split") for anything else;
// validate_pipeline checks the counts against the model and the pipeline.
std::vector<int64_t> parse_pp_split(const std::string& text);

// "2 pipeline stages", or with virtual stages "4 model chunks (2 stages of 2)".
std::string pipeline_chunks_text(int64_t pp, int64_t chunks_per_stage);

// --pp-split's counts against the pp × chunks_per_stage chunks they split: one for each, each
// between 1 and the model's `layers` blocks, all of them. Throws InvalidInput("--pp-split").
void validate_split_counts(const std::vector<int64_t>& split, int64_t pp, int64_t chunks_per_stage,
                           int64_t layers);

// --pp-split's word for a split chosen from the chain's measured costs (plan/balanced_split.h).
inline constexpr const char* kBalancedSplit = "balanced";

// The split `text` names, as --pp-split and the window's Stage split take it: "balanced", a list
// (parse_pp_split), or "" for the rule's. Throws InvalidInput("--pp-split") as parse_pp_split.
void set_pp_split(RunConfig& config, const std::string& text);

}  // namespace rematlab
