// The Scale tab's pictures: every layout evaluated against memory per GPU, the grid of tensor ×
// pipeline degrees, and the chosen layout's memory by part.
#include <qcustomplot.h>

#include <QHeaderView>
#include <QLabel>
#include <QTableWidget>
#include <algorithm>
#include <map>
#include <set>

#include "chart_style.h"
#include "scale_view.h"
#include "units.h"

namespace rematlab::ui {
namespace {

constexpr double kPointPixels = 8.0;  // how near the pointer a point is said

QCPGraph* scatter(QCustomPlot* chart, const QString& name, const QColor& color,
                  QCPScatterStyle::ScatterShape shape, double size) {
  QCPGraph* graph = chart->addGraph();
  graph->setName(name);
  graph->setLineStyle(QCPGraph::lsNone);
  graph->setScatterStyle(QCPScatterStyle(shape, color, size));
  return graph;
}

QString point_text(const layout::Layout& layout, int64_t memory, double tokens_per_s, bool fits) {
  return QString("%1\n%2 GiB per GPU, %3 tokens/s%4")
      .arg(QString::fromStdString(layout::layout_name(layout)))
      .arg(static_cast<double>(memory) / kGiB, 0, 'f', 1)
      .arg(tokens_per_s, 0, 'f', 0)
      .arg(fits ? "" : "\ndoes not fit");
}

}  // namespace

void ScaleView::draw_frontier() {
  chart_->clearGraphs();
  chart_->clearItems();
  hover_points_.clear();
  if (!answer_ || !request_) {
    reset_empty_axes(chart_);
    chart_->replot();
    return;
  }
  const double tokens = static_cast<double>(request_->global_batch * request_->arch.seq_len);
  QCPGraph* over =
      scatter(chart_, "does not fit", QColor(170, 170, 170), QCPScatterStyle::ssCross, 4);
  QCPGraph* fits = scatter(chart_, "fits", QColor(31, 119, 180), QCPScatterStyle::ssDisc, 4);
  QVector<double> over_x, over_y, fit_x, fit_y;
  for (const auto& point : answer_->points) {
    const double x = static_cast<double>(point.memory_bytes) / kGiB;
    const double y = tokens / point.step_s;
    (point.fits ? fit_x : over_x).push_back(x);
    (point.fits ? fit_y : over_y).push_back(y);
    hover_points_.push_back({x, y, point_text(point.layout, point.memory_bytes, y, point.fits)});
  }
  over->setData(over_x, over_y);
  fits->setData(fit_x, fit_y);
  QCPGraph* frontier = chart_->addGraph();
  frontier->setName("frontier");
  frontier->setPen(QPen(QColor(214, 39, 40), 2));
  frontier->setLineStyle(QCPGraph::lsStepLeft);
  frontier->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 7));
  for (const auto& edge : answer_->frontier) {
    frontier->addData(static_cast<double>(edge.memory.total()) / kGiB, edge.tokens_per_s);
  }
  chart_->rescaleAxes();
  const double device = static_cast<double>(request_->cluster.gpu.memory_bytes) / kGiB;
  // Infeasible layouts can need thousands of GiB: the view shows up to a few times the GPU.
  chart_->xAxis->setRange(0, std::min(chart_->xAxis->range().upper * 1.05, 4.0 * device));
  chart_->yAxis->setRange(0, chart_->yAxis->range().upper * 1.1);
  auto* line = new QCPItemStraightLine(chart_);
  line->point1->setCoords(device, 0);
  line->point2->setCoords(device, 1);
  line->setPen(QPen(Qt::darkGray, 1, Qt::DashLine));
  auto* label = new QCPItemText(chart_);
  label->position->setCoords(device, chart_->yAxis->range().upper);
  label->setPositionAlignment(Qt::AlignRight | Qt::AlignTop);
  label->setText(QString::fromStdString(request_->cluster.gpu.name) + " ");
  label->setColor(Qt::darkGray);
  chart_->legend->setVisible(true);
  chart_->replot();
}

QString ScaleView::describe_point_at(QPointF pixel) const {
  std::vector<const HoverPoint*> points;
  points.reserve(hover_points_.size());
  for (const HoverPoint& point : hover_points_) points.push_back(&point);
  return nearest_point_text(chart_, points, pixel, kPointPixels);
}

void ScaleView::fill_grid() {
  grid_->clear();
  if (!answer_) {
    grid_->setRowCount(0);
    grid_->setColumnCount(0);
    return;
  }
  // The fastest fitting layout per (tensor or expert, pipeline) degree; every degree pair
  // evaluated gets a cell, blank (—) where nothing fits. A mixture of experts is split over
  // expert ranks (at TP 1) or by width over tensor ranks (at EP 1): its rows are EP 1, 2, … and
  // then TP 2, 4, ….
  const bool experts = request_ && request_->arch.moe.enabled();
  using RowKey = std::pair<int64_t, int64_t>;  // tensor, expert degree
  std::set<RowKey> tps;
  std::set<int64_t> pps;
  std::map<std::pair<RowKey, int64_t>, const layout::LayoutPoint*> fastest;
  for (const auto& point : answer_->points) {
    const auto key = std::make_pair(RowKey{point.layout.tp, point.layout.ep}, point.layout.pp);
    tps.insert(key.first);
    pps.insert(key.second);
    if (!point.fits) continue;
    auto& best = fastest[key];
    if (!best || point.step_s < best->step_s) best = &point;
  }
  const std::vector<RowKey> rows(tps.begin(), tps.end());
  const std::vector<int64_t> columns(pps.begin(), pps.end());
  grid_->setRowCount(static_cast<int>(rows.size()));
  grid_->setColumnCount(static_cast<int>(columns.size()));
  QStringList row_names, column_names;
  for (const auto& [tp, ep] : rows) {
    row_names << (experts && tp == 1 ? QString("EP %1").arg(ep) : QString("TP %1").arg(tp));
  }
  for (int64_t pp : columns) column_names << QString("PP %1").arg(pp);
  grid_->setVerticalHeaderLabels(row_names);
  grid_->setHorizontalHeaderLabels(column_names);
  double quickest = 0.0;
  for (const auto& [key, point] : fastest) {
    quickest = std::max(quickest, 1.0 / point->step_s);
  }
  const double tokens =
      request_ ? static_cast<double>(request_->global_batch * request_->arch.seq_len) : 0.0;
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t c = 0; c < columns.size(); ++c) {
      const auto found = fastest.find({rows[r], columns[c]});
      auto* item = new QTableWidgetItem;
      item->setTextAlignment(Qt::AlignCenter);
      if (found == fastest.end()) {
        item->setText("—");
        item->setToolTip(experts && rows[r].first == 1
                             ? "Nothing fits at this expert and pipeline degree"
                             : "Nothing fits at this tensor and pipeline degree");
      } else {
        const layout::LayoutPoint& point = *found->second;
        const double share = (1.0 / point.step_s) / quickest;  // 1 for the fastest
        item->setText(QString::number(tokens / point.step_s / 1000.0, 'f', 1) + "k");
        item->setBackground(QColor::fromHsvF(0.33 * share, 0.45, 0.95));
        item->setToolTip(point_text(point.layout, point.memory_bytes, tokens / point.step_s, true));
      }
      grid_->setItem(static_cast<int>(r), static_cast<int>(c), item);
    }
  }
  grid_->resizeColumnsToContents();
}

void ScaleView::draw_memory_bar() {
  const layout::LayoutEvaluation* layout = chosen();
  if (!layout || !request_) {
    bar_->set_parts({}, 0, {});
    return;
  }
  const layout::MemoryParts& m = layout->memory;
  const int64_t device = request_->cluster.gpu.memory_bytes;
  bar_->set_parts({{"weights", m.weights, QColor(31, 119, 180)},
                   {"gradients", m.gradients, QColor(255, 127, 14)},
                   {"master", m.master, QColor(44, 160, 44)},
                   {"optimizer", m.optimizer, QColor(214, 39, 40)},
                   {"activations", m.activations, QColor(148, 103, 189)},
                   {"buffers", m.buffers, QColor(140, 86, 75)},
                   {"allowance", m.allowance, QColor(180, 180, 180)}},
                  device,
                  QString("%1 of %2 GiB per GPU: %3")
                      .arg(gib(m.total()), gib(device),
                           QString::fromStdString(layout::layout_name(layout->layout))));
}

}  // namespace rematlab::ui
