// What data parallelism partitions across ranks (ZeRO stages 1, 2 and 3): nothing (every rank
// holds every model state), the optimizer state, the optimizer state and the gradients, or all
// three with the parameters (each gathered whole only while it is used).
#pragma once

#include <string>

namespace rematlab {

enum class ShardMode { kNone, kOptimizer, kGradients, kParameters };

ShardMode parse_shard(const std::string& text);  // throws InvalidInput("--shard", …)
std::string to_string(ShardMode mode);

}  // namespace rematlab
