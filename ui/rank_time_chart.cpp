#include "rank_time_chart.h"

#include <qcustomplot.h>

#include <algorithm>

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
    case RankTimePart::kCollectives:
      return "other";
  }
  return "";
}

}  // namespace

double rank_time_ms(const RankResult& rank, RankTimePart part) {
  const double neighbours = std::max(0.0, rank.bubble_ms) + std::max(0.0, rank.transfer_ms);
  switch (part) {
    case RankTimePart::kComputing:
      return std::max(0.0, rank.step_ms - std::max(rank.comm_wait_ms, neighbours));
    case RankTimePart::kBubble:
      return std::max(0.0, rank.bubble_ms);
    case RankTimePart::kTransfers:
      return std::max(0.0, rank.transfer_ms);
    case RankTimePart::kCollectives:
      return std::max(0.0, rank.comm_wait_ms - neighbours);
  }
  return 0.0;
}

void fill_rank_time_chart(QCustomPlot* chart, const std::vector<RunRecord>& runs) {
  chart->clearPlottables();
  chart->legend->setVisible(false);
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  double position = 0.0;
  double top = 0.0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::vector<RankResult>& ranks = runs[i].result.ranks;
    if (ranks.empty()) continue;
    // The first run's parts are the key: the others differ from it only by their colour.
    const bool key = position == 0.0;
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
      if (!key) bars->removeFromLegend();
      if (below) bars->moveAbove(below);
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        bars->addData(position + static_cast<double>(r), rank_time_ms(ranks[r], which));
      }
      below = bars;
    }
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      ticker->addTick(position + static_cast<double>(r),
                      QString("#%1\nr%2").arg(runs[i].id).arg(ranks[r].rank));
      top = std::max(top, ranks[r].step_ms);
    }
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
  chart->yAxis->setRange(0.0, top > 0.0 ? top * 1.1 : 1.0);
  chart->replot();
}

}  // namespace rematlab::ui
