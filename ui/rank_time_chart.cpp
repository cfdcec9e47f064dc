#include "rank_time_chart.h"

#include <qcustomplot.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "chart_style.h"
#include "live_charts.h"

namespace rematlab::ui {
namespace {

// A run keeps its colour; the parts differ by their fill: solid computing, then lighter and
// patterned waits, so that a run's bars read as one run and its waits as waits.
QBrush part_brush(const QColor& colour, RankTimePart part) {
  switch (part) {
    case RankTimePart::kComputing:
      return QBrush(colour);
    case RankTimePart::kBubble:
      return QBrush(colour.lighter(170));
    case RankTimePart::kTransfers:
      return QBrush(colour.darker(170));
    case RankTimePart::kAllToAll:
      return QBrush(colour, Qt::Dense4Pattern);
    case RankTimePart::kCollectives:
      return QBrush(colour, Qt::BDiagPattern);
  }
  return QBrush(colour);
}

const char* part_name(RankTimePart part) {
  switch (part) {
    case RankTimePart::kComputing:
      return "compute";
    case RankTimePart::kBubble:
      return "bubble";
    case RankTimePart::kTransfers:
      return "transfer";
    case RankTimePart::kAllToAll:
      return "all-to-all";
    case RankTimePart::kCollectives:
      return "other";
  }
  return "";
}

// A run with ranks' figures from at least one step: the others have no bar.
bool drawn(const RunRecord& run) {
  return !run.result.ranks.empty() && run.has_result && run.result.steps_completed > 0;
}

}  // namespace

double rank_time_ms(const RankResult& rank, RankTimePart part) {
  // A record is outside input: what is not a finite time (a hand edit, or a figure a record
  // from before it was measured lacks) counts as none, so no bar reaches past the axis.
  auto ms = [](double value) { return std::isfinite(value) && value > 0.0 ? value : 0.0; };
  // The waits measured apart (a pipeline's on its neighbours, the experts' exchanges).
  const double apart = ms(rank.bubble_ms) + ms(rank.transfer_ms) + ms(rank.dispatch_ms);
  const double waited = std::max(ms(rank.comm_wait_ms), apart);
  switch (part) {
    case RankTimePart::kComputing:
      return std::max(0.0, ms(rank.step_ms) - waited);
    case RankTimePart::kBubble:
      return ms(rank.bubble_ms);
    case RankTimePart::kTransfers:
      return ms(rank.transfer_ms);
    case RankTimePart::kAllToAll:
      return ms(rank.dispatch_ms);
    case RankTimePart::kCollectives:
      return waited - apart;
  }
  return 0.0;
}

void fill_rank_time_chart(QCustomPlot* chart, const std::vector<RunRecord>& runs) {
  chart->clearPlottables();
  chart->legend->setVisible(false);
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  double position = 0.0;
  double top = 0.0;
  bool key = true;  // the first run's parts are the key: the others differ only by their colour
  // The key names only the parts some rank shown has (no bubble where nothing is a pipeline): a
  // small chart keeps its height for the bars.
  std::vector<bool> shown(kRankTimeParts, false);
  shown[static_cast<int>(RankTimePart::kComputing)] = true;
  for (const RunRecord& run : runs) {
    if (!drawn(run)) continue;
    for (const RankResult& rank : run.result.ranks) {
      for (int part = 0; part < kRankTimeParts; ++part) {
        if (rank_time_ms(rank, static_cast<RankTimePart>(part)) > 0.0) shown[part] = true;
      }
    }
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::vector<RankResult>& ranks = runs[i].result.ranks;
    if (!drawn(runs[i])) continue;
    position += 0.5;  // a gap between runs
    QCPBars* below = nullptr;
    for (int part = 0; part < kRankTimeParts; ++part) {
      auto* bars = new QCPBars(chart->xAxis, chart->yAxis);  // owned by the chart
      const auto which = static_cast<RankTimePart>(part);
      bars->setName(key ? QString(part_name(which))
                        : QString("#%1 %2").arg(runs[i].id).arg(part_name(which)));
      bars->setWidth(0.8);
      bars->setPen(Qt::NoPen);
      bars->setBrush(part_brush(run_colour(static_cast<int>(i)), which));
      if (!key || !shown[part]) bars->removeFromLegend();
      if (below) bars->moveAbove(below);
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        bars->addData(position + static_cast<double>(r), rank_time_ms(ranks[r], which));
      }
      below = bars;
    }
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      ticker->addTick(position + static_cast<double>(r),
                      QString("#%1\nr%2").arg(runs[i].id).arg(ranks[r].rank));
      double stacked = 0.0;
      for (int part = 0; part < kRankTimeParts; ++part) {
        stacked += rank_time_ms(ranks[r], static_cast<RankTimePart>(part));
      }
      top = std::max(top, stacked);
    }
    key = false;
    position += static_cast<double>(ranks.size());
  }
  if (position == 0.0) {
    chart->xAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    reset_empty_axes(chart);
    chart->replot();
    return;
  }
  chart->legend->setVisible(true);
  chart->xAxis->setTicker(ticker);
  chart->xAxis->setRange(0.0, position);
  // Within what QCustomPlot can scale (a hand-edited 1e300 would be ignored, the axis kept).
  chart->yAxis->setRange(0.0, top > 0.0 ? std::min(top * 1.1, QCPRange::maxRange / 2) : 1.0);
  chart->replot();
}

}  // namespace rematlab::ui
