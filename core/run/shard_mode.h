// What data parallelism partitions across ranks (ZeRO stages 1 and 2): nothing (every rank
// holds every model state), the optimizer state, or the optimizer state and the gradients.
#pragma once

#include <string>

namespace rematlab {

enum class ShardMode { kNone, kOptimizer, kGradients };

ShardMode parse_shard(const std::string& text);  // throws InvalidInput("--shard", …)
std::string to_string(ShardMode mode);

}  // namespace rematlab
