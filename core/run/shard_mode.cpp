#include "run/shard_mode.h"

#include "common/errors.h"

namespace rematlab {

ShardMode parse_shard(const std::string& text) {
  if (text == "none") return ShardMode::kNone;
  if (text == "optimizer") return ShardMode::kOptimizer;
  if (text == "gradients") return ShardMode::kGradients;
  if (text == "parameters") return ShardMode::kParameters;
  throw InvalidInput("--shard",
                     "unknown mode '" + text + "' (use none, optimizer, gradients or parameters)");
}

std::string to_string(ShardMode mode) {
  switch (mode) {
    case ShardMode::kOptimizer:
      return "optimizer";
    case ShardMode::kGradients:
      return "gradients";
    case ShardMode::kParameters:
      return "parameters";
    case ShardMode::kNone:
      break;
  }
  return "none";
}

}  // namespace rematlab
