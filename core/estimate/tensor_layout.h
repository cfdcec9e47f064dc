// One rank's share of a model split over tensor ranks (docs/parallel.md), as counting needs it:
// query heads, the MLP width and the vocabulary divide by T; key/value heads divide when T
// divides them, otherwise every rank keeps them all and uses the one its query heads share;
// norms, biases of row-parallel layers and GPT's position table stay whole on every rank. Under
// sequence parallelism the residual stream, the norms and the embedding's output hold s/T tokens.
#pragma once

#include <cstdint>

#include "estimate/architecture.h"

namespace rematlab::estimate {

struct TensorLayout {
  int64_t tp = 1;
  bool sequence_parallel = false;

  bool split() const { return tp > 1; }
};

// Throws InvalidInput("--tp" or "--sequence-parallel", …) with the rules `run` applies: the
// degree alone, then with the shape it splits.
void validate(const TensorLayout& layout);
void validate(const Architecture& arch, const TensorLayout& layout);

// Key/value width (values per token) one rank projects, and the width its attention uses.
int64_t rank_kv_projected(const Architecture& arch, int64_t tp);
int64_t rank_kv_used(const Architecture& arch, int64_t tp);

// One rank's parameters, and the most values any one of its parameter tensors holds.
int64_t rank_parameter_count(const Architecture& arch, int64_t tp);
int64_t rank_largest_parameter_count(const Architecture& arch, int64_t tp);

}  // namespace rematlab::estimate
