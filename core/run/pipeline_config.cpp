#include "run/pipeline_config.h"

#include <algorithm>

#include "checkpoint/checkpoint_policy.h"
#include "common/errors.h"
#include "run/shard_mode.h"
#include "runtime/device.h"

namespace rematlab {
namespace {

// Virtual stages: chunks of a pipeline's stages (their blocks and micro-batches
// validate_pipeline checks).
void validate_virtual_stages(const RunConfig& config) {
  const int64_t chunks = config.virtual_stages;
  const int64_t layers = config.model.layers;
  if (chunks < 1 || chunks > layers) {
    throw InvalidInput("--virtual-stages", "must be between 1 and the model's " +
                                               std::to_string(layers) + " blocks, got " +
                                               std::to_string(chunks));
  }
  if (chunks > 1 && config.pp == 1) {
    throw InvalidInput("--virtual-stages", "model chunks per stage need a pipeline: give " +
                                               setting("pp", "2") + " or more");
  }
}

// --pp-split: a count of blocks for every chunk, each at least one, all of them the model's.
void validate_pipeline_split(const RunConfig& config) {
  if (config.pp_split.empty()) return;
  validate_split_counts(config.pp_split, config.pp, config.virtual_stages, config.model.layers);
}

// What a pipeline's stages take: a stages: policy and a split of their number, and nothing it
// cannot combine with yet.
void validate_pipeline_policy_and_split(const RunConfig& config) {
  const int64_t pp = config.pp;
  const int64_t chunks = config.virtual_stages;
  auto not_yet = [](const char* flag, const std::string& what) {
    throw InvalidInput(flag, what + " is not built for pipeline stages yet");
  };
  const CheckpointPolicy policy = CheckpointPolicy::parse(config.checkpoint);
  // stages: gives a policy to each chunk, in chain order: a stage's own under 1F1B.
  if (policy.kind() == CheckpointPolicy::Kind::kStages &&
      static_cast<int64_t>(policy.stages().size()) != pp * chunks) {
    throw InvalidInput("--checkpoint", "'" + config.checkpoint + "' gives " +
                                           std::to_string(policy.stages().size()) +
                                           " stages' policies for " +
                                           pipeline_chunks_text(config.pp, config.virtual_stages));
  }
  validate_pipeline_split(config);
  if (config.pp_split_balanced) {
    // A stages: policy names each chunk's sublayers, which the balanced split moves.
    if (policy.kind() == CheckpointPolicy::Kind::kStages) {
      throw InvalidInput("--pp-split", "balanced moves the blocks that '" + config.checkpoint +
                                           "' names chunk by chunk: give the split as a list, "
                                           "or plan:BUDGET to plan each stage after it");
    }
    if (!config.pp_split.empty()) {
      throw InvalidInput("--pp-split", "is balanced or a list, not both");
    }
  }
  const ShardMode shard = parse_shard(config.shard);
  if (shard == ShardMode::kParameters) not_yet("--shard", "sharding parameters");
  if (parse_offload(config.offload).kind != OffloadKind::kNone) not_yet("--offload", "offload");
}

}  // namespace

// Pipeline parallelism: every chunk needs a block, 1F1B a micro-batch per stage at least and the
// interleaved schedule rounds of them; what it cannot combine with yet is refused before
// anything starts.
void validate_pipeline(const RunConfig& config) {
  const int64_t pp = config.pp;
  if (pp < 1 || pp > kMaxWorldSize) {
    throw InvalidInput("--pp", "must be between 1 and " + std::to_string(kMaxWorldSize) + ", got " +
                                   std::to_string(pp));
  }
  const int64_t chunks = config.virtual_stages;
  const int64_t layers = config.model.layers;
  validate_virtual_stages(config);
  if (pp == 1) {
    if (!config.pp_split.empty() || config.pp_split_balanced) {
      throw InvalidInput("--pp-split", "splits the blocks between pipeline stages: give " +
                                           setting("pp", "2") + " or more");
    }
    return;
  }
  if (pp > layers) {
    throw InvalidInput("--pp", std::to_string(pp) + " stages for " + std::to_string(layers) +
                                   " blocks: every stage needs one block at least");
  }
  if (pp * chunks > layers) {
    throw InvalidInput("--virtual-stages", std::to_string(pp) + " stages of " +
                                               std::to_string(chunks) + " chunks for " +
                                               std::to_string(layers) +
                                               " blocks: every chunk needs one block at least");
  }
  if (config.accum < pp) {
    throw InvalidInput("--accum", std::to_string(config.accum) + " micro-batch(es) for " +
                                      std::to_string(pp) +
                                      " stages: a pipeline needs at least as many micro-batches "
                                      "as stages (" +
                                      setting("accum", std::to_string(pp)) + " or more)");
  }
  if (chunks > 1 && config.accum % pp != 0) {
    throw InvalidInput("--accum", std::to_string(config.accum) +
                                      " micro-batches: the interleaved schedule runs them in "
                                      "rounds of the " +
                                      std::to_string(pp) + " stages (give a multiple of " +
                                      std::to_string(pp) + ")");
  }
  // Each message's tag numbers its micro-batch, sending chunk, direction and whether it is the
  // notice before a tensor in an int, below the tied head's two (parallel/pipeline_exchange.cpp).
  const int64_t most_micro_batches = ((int64_t{1} << 29) - 1) / (pp * chunks);
  if (config.accum > most_micro_batches) {
    throw InvalidInput("--accum", std::to_string(config.accum) + " micro-batches through " +
                                      std::to_string(pp * chunks) +
                                      " chunks are more than a pipeline's messages can number "
                                      "(at most " +
                                      std::to_string(most_micro_batches) + ")");
  }
  // Each stage holds T·D ranks (tensor ranks innermost, then the pipelines, which are data
  // ranks): the world is a multiple of one pipeline's P·T.
  const int64_t pipeline_ranks = pp * std::max<int64_t>(1, config.tp);
  if (config.world_size < pipeline_ranks || config.world_size % pipeline_ranks != 0) {
    const std::string layout = config.tp > 1 ? std::to_string(pp) + " stages of " +
                                                   std::to_string(config.tp) + " tensor ranks"
                                             : std::to_string(pp) + " stages";
    throw InvalidInput("--pp", layout + " need " +
                                   setting("nproc", std::to_string(pipeline_ranks)) +
                                   " or a multiple of it (one pipeline a data rank)");
  }
  // NCCL's sends block until their receives are posted, and the stages send both ways at once:
  // they would need their sends and receives coalesced, which is not built.
  if (parse_device(config.device).is_cuda()) {
    throw InvalidInput("--pp",
                       "pipeline stages run on the CPU (Gloo) only for now: their NCCL "
                       "sends and receives are not built yet");
  }
  validate_pipeline_policy_and_split(config);
}

std::string pipeline_chunks_text(int64_t pp, int64_t chunks_per_stage) {
  return chunks_per_stage == 1
             ? std::to_string(pp) + " pipeline stages"
             : std::to_string(pp * chunks_per_stage) + " model chunks (" + std::to_string(pp) +
                   " stages of " + std::to_string(chunks_per_stage) + ")";
}

void validate_split_counts(const std::vector<int64_t>& split, int64_t pp, int64_t chunks_per_stage,
                           int64_t layers) {
  const int64_t chunks = pp * chunks_per_stage;
  if (static_cast<int64_t>(split.size()) != chunks) {
    throw InvalidInput("--pp-split",
                       "gives " + std::to_string(split.size()) + " block counts for " +
                           pipeline_chunks_text(pp, chunks_per_stage) + ": give one for each");
  }
  int64_t blocks = 0;
  for (const int64_t chunk : split) {
    if (chunk < 1 || chunk > layers) {
      throw InvalidInput("--pp-split", "every chunk needs between 1 and the model's " +
                                           std::to_string(layers) + " blocks, got " +
                                           std::to_string(chunk));
    }
    blocks += chunk;  // as many chunks as pp · V, each at most `layers` blocks: no overflow
  }
  if (blocks != layers) {
    throw InvalidInput("--pp-split", "gives " + std::to_string(blocks) +
                                         " blocks in all; the model has " + std::to_string(layers));
  }
}

std::vector<int64_t> parse_pp_split(const std::string& text) {
  std::vector<int64_t> split;
  if (text.empty()) return split;
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = text.find(',', begin);
    const std::string part =
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    // Digits only: stoll would take a sign, blanks or a hexadecimal prefix.
    const bool digits = !part.empty() && part.size() <= 9 &&
                        part.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoll(part) < 1) {
      throw InvalidInput("--pp-split", "'" + text +
                                           "' is not a list of block counts, one for each chunk "
                                           "(e.g. 3,5), nor balanced");
    }
    split.push_back(std::stoll(part));
    if (comma == std::string::npos) return split;
    begin = comma + 1;
  }
}

void set_pp_split(RunConfig& config, const std::string& text) {
  const bool balanced = text == kBalancedSplit;
  config.pp_split = balanced ? std::vector<int64_t>{} : parse_pp_split(text);  // may throw first
  config.pp_split_balanced = balanced;
}

}  // namespace rematlab
