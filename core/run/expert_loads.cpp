#include "run/expert_loads.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "common/errors.h"

namespace rematlab {

double most_expert_rank_load(const MoeOptions& moe, int64_t expert_ranks) {
  if (expert_ranks <= 1 || !moe.enabled()) return 1.0;
  const int64_t held = std::max<int64_t>(1, moe.experts / expert_ranks);
  const int64_t k = std::max<int64_t>(1, moe.experts_per_token);
  // In doubles: a stored configuration may hold any counts.
  double most = static_cast<double>(expert_ranks) * static_cast<double>(std::min(k, held)) /
                static_cast<double>(k);
  // A capacity drops rows before they are sent: a rank whose tokens all chose the same k
  // experts sends k · capacity and may take E · capacity.
  if (moe.capacity_factor > 0.0) {
    most = std::max(most, static_cast<double>(moe.experts) / static_cast<double>(k));
  }
  return std::max(1.0, most);
}

namespace {

// `flag`'s `load` breaks `rule`, which `bound` states: "<rule> <bound>, got <load>".
InvalidInput load_refused(const char* flag, const std::string& rule, double bound, double load) {
  char shown[64];
  std::snprintf(shown, sizeof shown, "%.10g, got %.10g", bound, load);
  return InvalidInput(flag, rule + " " + shown);
}

void validate_one_expert_load(const char* flag, double load, const MoeOptions& moe,
                              int64_t expert_ranks) {
  if (load == 1.0) return;
  if (expert_ranks <= 1) {
    throw InvalidInput(flag,
                       "needs expert ranks (--ep above 1): without them each rank's experts "
                       "take its own tokens' rows");
  }
  const double most = most_expert_rank_load(moe, expert_ranks);
  if (!(load >= 1.0 && load <= most)) {
    throw load_refused(flag,
                       "must be between 1 (balanced) and what a rank's experts take when every "
                       "token sends them all it can,",
                       most, load);
  }
}

}  // namespace

double most_expert_load(const MoeOptions& moe) {
  if (!moe.enabled()) return 1.0;
  // An expert takes at most one of each token's k choices: E / k times its even share.
  return std::max(1.0, static_cast<double>(moe.experts) /
                           static_cast<double>(std::max<int64_t>(1, moe.experts_per_token)));
}

void validate_expert_load(double load, const MoeOptions& moe) {
  if (load == 1.0) return;
  if (!moe.enabled())
    throw InvalidInput("--expert-load", "sizes a mixture's experts; this model has none");
  const double most = most_expert_load(moe);
  if (!(load >= 1.0 && load <= most)) {
    throw load_refused("--expert-load",
                       "must be between 1 (balanced) and the experts over the experts a token "
                       "chooses,",
                       most, load);
  }
}

void validate_expert_loads(double rank_load, std::optional<double> block_load,
                           const MoeOptions& moe, int64_t expert_ranks) {
  validate_one_expert_load("--expert-rank-load", rank_load, moe, expert_ranks);
  if (!block_load) return;
  validate_one_expert_load("--expert-block-load", *block_load, moe, expert_ranks);
  if (*block_load < rank_load) {
    throw load_refused("--expert-block-load",
                       "is the busiest block's load, at least the step's mean (--expert-rank-load)",
                       rank_load, *block_load);
  }
}

}  // namespace rematlab
