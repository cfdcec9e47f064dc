#include "rank_layout.h"

#include "common/byte_size.h"
#include "run/pipeline_config.h"

namespace rematlab::ui {

void apply_rank_layout(const RankLayout& layout, RunConfig& config) {
  config.world_size = layout.ranks;
  config.shard = layout.shard.toStdString();
  config.tp = layout.tensor_ranks;
  config.sequence_parallel = layout.sequence_parallel;
  config.pp = layout.pipeline_stages;
  config.virtual_stages = layout.virtual_stages;
  set_pp_split(config, layout.pipeline_split.toStdString());
  if (!layout.bucket_size.isEmpty()) {
    config.bucket_bytes = parse_byte_size(layout.bucket_size.toStdString(), "--bucket-size");
  }
}

}  // namespace rematlab::ui
