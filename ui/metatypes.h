// Core value types that travel through queued signals. Every header whose signals carry them
// includes this first, so the declarations precede any use moc makes of them.
#pragma once

#include <QMetaType>
#include <vector>

#include "memory/timeline_point.h"
#include "run/run_config.h"
#include "run/run_status.h"
#include "run/step_metrics.h"

namespace rematlab::ui {

// Where a sweep is, as the worker reports it (a value: no pointers into the worker's state).
struct SweepPosition {
  int run_index = 0;  // 0-based
  int run_count = 0;
  qint64 step = 0;  // steps done in the current run
  qint64 total_steps = 0;
  double eta_s = -1.0;  // the whole sweep; negative while unknown
  QString label;
  QString activity;
};

using Timeline = std::vector<rematlab::TimelinePoint>;

// How the ranks of a multi-process run split it: `ranks` processes, what the data ranks shard,
// and how many ranks split each layer (tensor parallelism), the sequence too or not.
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

Q_DECLARE_METATYPE(rematlab::StepMetrics)
Q_DECLARE_METATYPE(rematlab::RunConfig)
Q_DECLARE_METATYPE(rematlab::RunStatus)
Q_DECLARE_METATYPE(rematlab::ui::SweepPosition)
Q_DECLARE_METATYPE(rematlab::ui::Timeline)
Q_DECLARE_METATYPE(rematlab::ui::RankLayout)
