// Where each rank's step went, for the runs of several ranks in a comparison: stacked bars, one
// per rank, of computing, the pipeline's bubble (idle until a neighbouring stage reached a
// message), its transfers, expert parallelism's all-to-all exchanges, and the other collectives'
// waits (tensor ranks, the data ranks' average). Every figure is the rank's median over its timed
// steps, as its record keeps it.
#pragma once

#include <vector>

#include "store/run_store.h"

class QCustomPlot;

namespace rematlab::ui {

// The parts of a rank's step, in the order they stack from the axis up.
enum class RankTimePart { kComputing, kBubble, kTransfers, kAllToAll, kCollectives };
inline constexpr int kRankTimeParts = 5;

// The part of `rank`'s median step; never negative (medians of the parts need not add up to
// the median wait, so what is left over is clamped), and a figure that is not a finite time
// counts as none (a hand-edited record; a pipeline recorded before its waits were split, whose
// whole wait then shows as other waits).
double rank_time_ms(const RankResult& rank, RankTimePart part);

// Fills `chart` with a bar for every rank of every run in `runs` that has ranks, grouped by run
// (ticks "#id" over "r0", "r1", …), each run in its own colour and each part in its own fill; the
// chart's legend names the parts, in the first such run's colour.
void fill_rank_time_chart(QCustomPlot* chart, const std::vector<RunRecord>& runs);

}  // namespace rematlab::ui
