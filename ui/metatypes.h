// Core value types that travel through queued signals. Every header whose signals carry them
// includes this first, so the declarations precede any use moc makes of them.
#pragma once

#include <QMetaType>
#include <vector>

#include "memory/timeline_point.h"
#include "rank_layout.h"
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

}  // namespace rematlab::ui

Q_DECLARE_METATYPE(rematlab::StepMetrics)
Q_DECLARE_METATYPE(rematlab::RunConfig)
Q_DECLARE_METATYPE(rematlab::RunStatus)
Q_DECLARE_METATYPE(rematlab::ui::SweepPosition)
Q_DECLARE_METATYPE(rematlab::ui::Timeline)
Q_DECLARE_METATYPE(rematlab::ui::RankLayout)
