#include "live_charts.h"

#include <qcustomplot.h>

#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>
#include <cmath>
#include <map>
#include <optional>

#include "chart_style.h"

namespace rematlab::ui {
namespace {

constexpr int kReplotIntervalMs = 33;  // at most ~30 replots a second
constexpr double kMiB = 1024.0 * 1024.0;

QCPGraph* add_graph(QCustomPlot* plot, const QString& name, QColor colour, Qt::PenStyle style) {
  QCPGraph* graph = plot->addGraph();
  graph->setName(name);
  // Width 1 keeps Qt's fast path for lines (wider pens go through the stroker, ~10× slower);
  // adaptive sampling draws at most a few points per pixel column of a 100k-point curve.
  graph->setPen(QPen(colour, 1.0, style));
  graph->setAdaptiveSampling(true);
  return graph;
}

QColor phase_colour(MemoryPhase phase) {
  switch (phase) {
    case MemoryPhase::kForward:
      return QColor(0x1f, 0x77, 0xb4);
    case MemoryPhase::kBackward:
      return QColor(0xd6, 0x27, 0x28);
    case MemoryPhase::kRecompute:
      return QColor(0xff, 0x7f, 0x0e);
    case MemoryPhase::kOptimizer:
      return QColor(0x2c, 0xa0, 0x2c);
    case MemoryPhase::kOffloadWait:
      return QColor(0x94, 0x67, 0xbd);
    case MemoryPhase::kIdle:
      break;
  }
  return Qt::gray;
}

}  // namespace

QColor run_colour(int index) {
  static const QColor kPalette[] = {QColor(0x1f, 0x77, 0xb4), QColor(0xd6, 0x27, 0x28),
                                    QColor(0x2c, 0xa0, 0x2c), QColor(0xff, 0x7f, 0x0e),
                                    QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b),
                                    QColor(0xe3, 0x77, 0xc2), QColor(0x7f, 0x7f, 0x7f),
                                    QColor(0xbc, 0xbd, 0x22), QColor(0x17, 0xbe, 0xcf)};
  constexpr int kColours = sizeof kPalette / sizeof kPalette[0];
  return kPalette[((index % kColours) + kColours) % kColours];
}

LiveCharts::LiveCharts(QWidget* parent)
    : QWidget(parent),
      loss_plot_(make_chart("Loss", "step", "nats/token")),
      memory_plot_(
          make_chart("Device memory: peak (solid), live at step end (dotted)", "step", "MiB")),
      throughput_plot_(make_chart("Throughput", "step", "tokens/s")),
      timeline_plot_(make_chart("Memory in the last recorded step", "ms", "MiB")),
      smoothing_box_(new QDoubleSpinBox) {
  smoothing_box_->setRange(0.0, 0.999);
  smoothing_box_->setSingleStep(0.05);
  smoothing_box_->setDecimals(3);
  smoothing_box_->setValue(smoothing_);
  smoothing_box_->setToolTip(
      "Weight of the exponential moving average drawn over the raw loss and throughput");
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel("Smoothing"));
  controls->addWidget(smoothing_box_);
  controls->addStretch();
  controls->addWidget(new QLabel("Drag to pan, wheel to zoom, double-click to reset"));
  auto* grid = new QGridLayout;
  grid->addWidget(loss_plot_, 0, 0);
  grid->addWidget(memory_plot_, 0, 1);
  grid->addWidget(throughput_plot_, 1, 0);
  grid->addWidget(timeline_plot_, 1, 1);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(controls);
  layout->addLayout(grid, 1);
  replot_timer_.setSingleShot(true);
  replot_timer_.setInterval(kReplotIntervalMs);
  connect(&replot_timer_, &QTimer::timeout, this, &LiveCharts::replot_now);
  connect(smoothing_box_, &QDoubleSpinBox::valueChanged, this, &LiveCharts::set_smoothing);
}

QCustomPlot* LiveCharts::plot(Chart chart) const {
  switch (chart) {
    case kLoss:
      return loss_plot_;
    case kMemory:
      return memory_plot_;
    case kThroughput:
      return throughput_plot_;
    case kTimeline:
      return timeline_plot_;
  }
  return loss_plot_;
}

void LiveCharts::clear() {
  for (QCustomPlot* chart : {loss_plot_, memory_plot_, throughput_plot_, timeline_plot_}) {
    chart->clearGraphs();
    reset_empty_axes(chart);  // not the last sweep's ranges
  }
  set_chart_title(timeline_plot_, "Memory in the last recorded step");
  runs_.clear();
  budget_line_ = nullptr;
  last_step_ = 1.0;
  schedule_replot();
}

LiveCharts::RunCurves* LiveCharts::curves(int index) {
  for (auto& [run, curves] : runs_) {
    if (run == index) return &curves;
  }
  return nullptr;
}

void LiveCharts::begin_run(int index, const QString& label, double budget_bytes) {
  if (curves(index)) return;
  const QColor colour = run_colour(index);
  RunCurves curves;
  curves.loss = add_graph(loss_plot_, label, colour.lighter(160), Qt::SolidLine);
  curves.loss->removeFromLegend();
  curves.smoothed = add_graph(loss_plot_, label, colour, Qt::SolidLine);
  curves.diverged = loss_plot_->addGraph();
  curves.diverged->setName(label + ": loss not finite");
  curves.diverged->setLineStyle(QCPGraph::lsNone);
  curves.diverged->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCross, colour, 11));
  curves.diverged->removeFromLegend();
  // One legend entry per run: the title says which line style is peak and which is live.
  curves.peak = add_graph(memory_plot_, label, colour, Qt::SolidLine);
  curves.live = add_graph(memory_plot_, label + " live at step end", colour, Qt::DotLine);
  curves.live->removeFromLegend();
  curves.throughput = add_graph(throughput_plot_, label, colour.lighter(160), Qt::SolidLine);
  curves.throughput->removeFromLegend();
  curves.throughput_smoothed = add_graph(throughput_plot_, label, colour, Qt::SolidLine);
  curves.label = label;
  runs_.emplace_back(index, curves);
  for (QCustomPlot* chart : {loss_plot_, memory_plot_, throughput_plot_}) {
    chart->legend->setVisible(true);
  }
  if (budget_bytes > 0 && !budget_line_) {
    budget_line_ = add_graph(memory_plot_, "budget", Qt::black, Qt::DashLine);
    budget_line_->setData({0.0, last_step_}, {budget_bytes / kMiB, budget_bytes / kMiB});
  }
  schedule_replot();
}

void LiveCharts::add_step(int index, const StepMetrics& step) {
  RunCurves* run = curves(index);
  if (!run) return;
  const double x = static_cast<double>(step.step + 1);
  if (std::isfinite(step.loss)) {
    run->ema = run->has_ema ? smoothing_ * run->ema + (1.0 - smoothing_) * step.loss : step.loss;
    run->has_ema = true;
    run->loss->addData(x, step.loss);
    run->smoothed->addData(x, run->ema);
  } else {
    // A gap in both curves (QCustomPlot breaks a line at NaN), and a cross where it diverged.
    run->loss->addData(x, std::nan(""));
    run->smoothed->addData(x, std::nan(""));
    run->diverged->addData(x, run->has_ema ? run->ema : 0.0);
  }
  run->peak->addData(x, step.peak_bytes / kMiB);
  run->live->addData(x, step.current_bytes / kMiB);
  run->throughput->addData(x, step.tokens_per_s);
  if (std::isfinite(step.tokens_per_s)) {
    run->throughput_ema = run->has_throughput_ema ? smoothing_ * run->throughput_ema +
                                                        (1.0 - smoothing_) * step.tokens_per_s
                                                  : step.tokens_per_s;
    run->has_throughput_ema = true;
  }
  run->throughput_smoothed->addData(x, run->throughput_ema);
  if (budget_line_ && x > last_step_) {
    last_step_ = x;
    const double level = budget_line_->data()->begin()->value;
    budget_line_->setData({0.0, last_step_}, {level, level});
  }
  schedule_replot();
}

void LiveCharts::show_timeline(const QString& label, const Timeline& timeline) {
  timeline_plot_->clearGraphs();
  std::map<MemoryPhase, QCPGraph*> by_phase;
  for (const TimelinePoint& point : timeline) {
    QCPGraph*& graph = by_phase[point.phase];
    if (!graph) {
      graph = timeline_plot_->addGraph();
      graph->setName(QString::fromStdString(to_string(point.phase)));
      graph->setLineStyle(QCPGraph::lsNone);
      graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, phase_colour(point.phase),
                                             phase_colour(point.phase), 3));
      graph->setAdaptiveSampling(true);
    }
    graph->addData(point.time_ms, point.bytes / kMiB);
  }
  timeline_plot_->legend->setVisible(!by_phase.empty());
  set_chart_title(timeline_plot_, "Memory in the last recorded step: " + label);
  schedule_replot();
}

namespace {

// Redraws `smoothed` as the moving average of `raw`; a non-finite point stays a gap. Returns the
// last average, or nullopt when there was no finite point.
std::optional<double> smooth(const QCPGraph* raw, QCPGraph* smoothed, double weight) {
  QVector<double> keys, values;
  std::optional<double> ema;
  for (auto it = raw->data()->constBegin(); it != raw->data()->constEnd(); ++it) {
    keys << it->key;
    if (!std::isfinite(it->value)) {
      values << it->value;
      continue;
    }
    ema = ema ? weight * *ema + (1.0 - weight) * it->value : it->value;
    values << *ema;
  }
  smoothed->setData(keys, values, /*alreadySorted=*/true);
  return ema;
}

// Exactly the same points: what exact recomputation gives for the loss of the same seed.
bool same_curve(const QCPGraph* a, const QCPGraph* b) {
  if (a->dataCount() == 0 || a->dataCount() != b->dataCount()) return false;
  for (auto i = a->data()->constBegin(), j = b->data()->constBegin(); i != a->data()->constEnd();
       ++i, ++j) {
    const bool both_gaps = std::isnan(i->value) && std::isnan(j->value);
    if (i->key != j->key || (!both_gaps && i->value != j->value)) return false;
  }
  return true;
}

}  // namespace

void LiveCharts::set_smoothing(double weight) {
  smoothing_ = std::clamp(weight, 0.0, 0.999);
  if (smoothing_box_->value() != smoothing_) smoothing_box_->setValue(smoothing_);
  for (auto& [index, run] : runs_) {
    const auto loss = smooth(run.loss, run.smoothed, smoothing_);
    run.ema = loss.value_or(0.0);
    run.has_ema = loss.has_value();
    const auto rate = smooth(run.throughput, run.throughput_smoothed, smoothing_);
    run.throughput_ema = rate.value_or(0.0);
    run.has_throughput_ema = rate.has_value();
  }
  schedule_replot();
}

void LiveCharts::finish_run(int index) {
  RunCurves* run = curves(index);
  if (!run) return;
  for (const auto& [other_index, other] : runs_) {
    if (other_index == index || !same_curve(run->loss, other.loss)) continue;
    run->smoothed->setName(QString("%1 (coincides with %2)").arg(run->label, other.label));
    // Dashed over the earlier solid line, so both stay visible where they coincide.
    QPen pen = run->smoothed->pen();
    pen.setStyle(Qt::DashLine);
    run->smoothed->setPen(pen);
    break;
  }
  schedule_replot();
}

QString LiveCharts::legend_name(Chart chart, int index) const {
  for (const auto& [run, curves] : runs_) {
    if (run != index) continue;
    switch (chart) {
      case kLoss:
        return curves.smoothed->name();
      case kMemory:
        return curves.peak->name();
      case kThroughput:
        return curves.throughput_smoothed->name();
      case kTimeline:
        break;
    }
  }
  return {};
}

int LiveCharts::points(Chart chart, int index) const {
  for (const auto& [run, curves] : runs_) {
    if (run != index) continue;
    switch (chart) {
      case kLoss:
        return curves.loss->dataCount();
      case kMemory:
        return curves.peak->dataCount();
      case kThroughput:
        return curves.throughput->dataCount();
      case kTimeline:
        return 0;
    }
  }
  return 0;
}

QStringList LiveCharts::export_images(const QString& directory, const QString& name) const {
  return save_charts({{"loss", loss_plot_},
                      {"memory", memory_plot_},
                      {"throughput", throughput_plot_},
                      {"timeline", timeline_plot_}},
                     directory, name);
}

void LiveCharts::schedule_replot() {
  if (!replot_timer_.isActive()) replot_timer_.start();
}

void LiveCharts::replot_now() {
  for (QCustomPlot* chart : {loss_plot_, memory_plot_, throughput_plot_, timeline_plot_}) {
    if (!chart_has_data(chart)) {
      chart->replot(QCustomPlot::rpQueuedReplot);
      continue;
    }
    chart->rescaleAxes();
    if (chart == loss_plot_) {  // a margin, so the lowest raw point is not drawn on the axis
      const QCPRange range = chart->yAxis->range();
      const double margin = std::max(range.size() * 0.05, 1e-3);
      chart->yAxis->setRange(range.lower - margin, range.upper + margin);
    } else {  // bytes and rates read best from zero
      chart->yAxis->setRange(0.0, chart->yAxis->range().upper * 1.05);
    }
    chart->replot(QCustomPlot::rpQueuedReplot);
  }
  ++replots_;
}

}  // namespace rematlab::ui
