// How the ranks of a multi-process run split it, as the form holds it and the ranks' launcher
// takes it (`run`'s --nproc, --shard, --tp, --pp and the rest).
#pragma once

#include <QString>

#include "run/run_config.h"

namespace rematlab::ui {

// `ranks` processes, what the data ranks shard and in what buckets, how many ranks split each
// layer (tensor parallelism, the sequence too or not) and the blocks (pipeline stages).
struct RankLayout {
  int ranks = 1;
  QString shard = "none";
  int tensor_ranks = 1;
  bool sequence_parallel = false;
  int pipeline_stages = 1;
  int virtual_stages = 1;
  QString pipeline_split;  // as --pp-split takes it; empty: the rule's
  QString bucket_size;     // as --bucket-size takes it; empty: the engine's
};

// `config` trained by `layout`'s ranks, as the CLI's flags would set it (not validated). Throws
// InvalidInput naming the flag of a setting the form holds as text (--pp-split, --bucket-size).
void apply_rank_layout(const RankLayout& layout, rematlab::RunConfig& config);

}  // namespace rematlab::ui
