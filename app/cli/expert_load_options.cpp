#include "cli/expert_load_options.h"

#include <string>
#include <utility>

#include "common/errors.h"

namespace rematlab::cli {

void ExpertLoadOptions::add_to(CLI::App& command, const char* rank_load_sizes) {
  command.add_option("--expert-rank-load", rank_load_,
                     std::string("With --ep: a run's 'expert rank load' (rows the fullest rank's "
                                 "experts take over its own tokens' rows; default 1, balanced): "
                                 "sizes its ") +
                         rank_load_sizes);
  command.add_option("--expert-block-load", block_load_,
                     "With --ep: the same for the busiest block alone (a run's 'expert block "
                     "load'; default the rank load): sizes a recomputed block's experts");
  command.add_option("--expert-load", expert_load_,
                     "A run's 'expert load' (the busiest expert's rows in one block over its even "
                     "share; default 1, balanced): sizes an expert's backward");
}

void ExpertLoadOptions::apply(estimate::Architecture* arch) const {
  for (const auto& [flag, given] :
       {std::pair{"--expert-rank-load", rank_load_}, std::pair{"--expert-block-load", block_load_},
        std::pair{"--expert-load", expert_load_}}) {
    if (!given) continue;
    if (arch == nullptr)
      throw InvalidInput(flag, "sizes a mixture's experts: give its shape (--model)");
    if (!arch->moe.enabled())
      throw InvalidInput(flag, "sizes a mixture's experts; this model has none");
  }
  if (rank_load_) arch->expert_rank_load = *rank_load_;
  if (block_load_) arch->expert_block_load = *block_load_;
  if (expert_load_) arch->expert_load = *expert_load_;
}

}  // namespace rematlab::cli
