#include "live_charts.h"

#include <qcustomplot.h>

#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QResizeEvent>
#include <QVBoxLayout>
#include <cmath>
#include <map>

#include "chart_legend.h"
#include "chart_style.h"
#include "elided_label.h"
#include "units.h"

namespace rematlab::ui {
namespace {

constexpr int kReplotIntervalMs = 33;  // at most ~30 replots a second
const char* const kLossTitle = "Loss (faint: each step; solid: smoothed)";
const char* const kThroughputTitle = "Throughput (faint: each step; solid: smoothed)";
const char* const kTimelineTitle = "Memory in the last recorded step";
constexpr double kSameMemory = 0.005;  // memory curves within 0.5 % of each other coincide

QCPGraph* add_graph(QCustomPlot* plot, const QString& name, QColor colour, Qt::PenStyle style) {
  QCPGraph* graph = plot->addGraph();
  graph->setName(name);
  // Width 1 keeps Qt's fast path for lines (wider pens go through the stroker, ~10× slower);
  // adaptive sampling draws at most a few points per pixel column of a 100k-point curve.
  graph->setPen(QPen(colour, 1.0, style));
  graph->setAdaptiveSampling(true);
  return graph;
}

// A line needs two points: until a curve has them, its one point is drawn as a dot, so a slow
// run shows its first step at once.
void mark_lone_point(QCPGraph* graph) {
  const bool lone = graph->dataCount() < 2;
  if (lone == (graph->scatterStyle().shape() != QCPScatterStyle::ssNone)) return;
  graph->setScatterStyle(
      lone ? QCPScatterStyle(QCPScatterStyle::ssDisc, graph->pen().color(), graph->pen().color(), 5)
           : QCPScatterStyle());
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

// Redraws `smoothed` as the bias-corrected moving average of `raw`; a non-finite point stays a
// gap. Returns the average's state after the last point.
template <typename Smoother>
Smoother smooth(const QCPGraph* raw, QCPGraph* smoothed, double weight) {
  QVector<double> keys, values;
  Smoother average;
  for (auto it = raw->data()->constBegin(); it != raw->data()->constEnd(); ++it) {
    keys << it->key;
    values << (std::isfinite(it->value) ? average.add(it->value, weight) : it->value);
  }
  smoothed->setData(keys, values, /*alreadySorted=*/true);
  return average;
}

// The same points: exactly for the loss (what exact recomputation gives for the same seed);
// within `tolerance` of the larger value for memory, where a difference under half a percent
// (the recomputed segments' RNG state, a few KiB) is less than a pixel and the curves still hide
// each other.
bool same_curve(const QCPGraph* a, const QCPGraph* b, double tolerance = 0.0) {
  if (a->dataCount() == 0 || a->dataCount() != b->dataCount()) return false;
  for (auto i = a->data()->constBegin(), j = b->data()->constBegin(); i != a->data()->constEnd();
       ++i, ++j) {
    const bool both_gaps = std::isnan(i->value) && std::isnan(j->value);
    const double allowed = tolerance * std::max(std::abs(i->value), std::abs(j->value));
    if (i->key != j->key || (!both_gaps && !(std::abs(i->value - j->value) <= allowed)))
      return false;
  }
  return true;
}

// A curve drawn over an earlier one is dashed on top of it, so both stay visible.
void dash(QCPGraph* graph) {
  QPen pen = graph->pen();
  pen.setStyle(Qt::DashLine);
  graph->setPen(pen);
}

}  // namespace

double LiveCharts::Smoother::add(double value, double weight) {
  sum = weight * sum + (1.0 - weight) * value;
  weight_left *= weight;
  return this->value();
}

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
      loss_plot_(make_chart(kLossTitle, "step", "nats/token")),
      memory_plot_(
          make_chart("Device memory: peak (solid), live at step end (dotted)", "step", "MiB")),
      throughput_plot_(make_chart(kThroughputTitle, "step", "tokens/s")),
      timeline_plot_(make_chart(kTimelineTitle, "ms", "MiB")),
      smoothing_box_(new QDoubleSpinBox),
      legend_(new ChartLegend),
      notice_(new QLabel) {
  smoothing_box_->setRange(0.0, 0.999);
  smoothing_box_->setSingleStep(0.05);
  smoothing_box_->setDecimals(3);
  smoothing_box_->setValue(smoothing_);
  smoothing_box_->setToolTip(
      "Weight of the exponential moving average drawn over each step's loss and throughput "
      "(bias-corrected, as TensorBoard does: the first points are not pulled towards the first)");
  auto* hint = new ElidedLabel("Drag: pan · wheel: zoom · double-click: reset");
  hint->setAlignment(Qt::AlignRight);
  hint->set_description(
      "In any chart: drag to pan, turn the wheel to zoom, double-click to "
      "show all the data again");
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel("Smoothing"));
  controls->addWidget(smoothing_box_);
  controls->addWidget(hint, 1);
  notice_->setObjectName("live-notice");
  // Two lines at most, each cut to the width (the whole in the tooltip): the charts keep room.
  notice_->setMinimumWidth(1);
  notice_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  notice_->setStyleSheet("color: #b00020;");
  notice_->hide();
  // The runs are named once, above the charts; their own legends are for exported images.
  for (QCustomPlot* chart : {loss_plot_, memory_plot_, throughput_plot_}) use_shared_legend(chart);
  auto* grid = new QGridLayout;
  grid->addWidget(loss_plot_, 0, 0);
  grid->addWidget(memory_plot_, 0, 1);
  grid->addWidget(throughput_plot_, 1, 0);
  grid->addWidget(timeline_plot_, 1, 1);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(controls);
  layout->addWidget(notice_);
  layout->addWidget(legend_);
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
  set_chart_title(timeline_plot_, kTimelineTitle);
  runs_.clear();
  endings_.clear();
  notice_->clear();
  notice_->hide();
  budget_line_ = nullptr;
  last_step_ = 1.0;
  update_legend();
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
  curves.diverged->setLineStyle(QCPGraph::lsNone);
  curves.diverged->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCross, colour, 11));
  curves.diverged->removeFromLegend();
  // One legend entry per run: the title says which line style is peak and which is live.
  curves.peak = add_graph(memory_plot_, label, colour, Qt::SolidLine);
  curves.live = add_graph(memory_plot_, label, colour, Qt::DotLine);
  curves.live->removeFromLegend();
  curves.throughput = add_graph(throughput_plot_, label, colour.lighter(160), Qt::SolidLine);
  curves.throughput->removeFromLegend();
  curves.throughput_smoothed = add_graph(throughput_plot_, label, colour, Qt::SolidLine);
  curves.label = label;
  name_curves(curves);
  runs_.emplace_back(index, curves);
  if (budget_bytes > 0 && !budget_line_) {
    budget_line_ = add_graph(memory_plot_, "budget", Qt::black, Qt::DashLine);
    budget_line_->setData({0.0, last_step_}, {budget_bytes / kMiB, budget_bytes / kMiB});
  }
  update_legend();
  schedule_replot();
}

void LiveCharts::rename_run(int index, const QString& label) {
  RunCurves* run = curves(index);
  if (!run || run->label == label) return;
  run->label = label;
  name_curves(*run);
  update_legend();
  schedule_replot();
}

// The curves' own names (what an exported chart's legend says).
void LiveCharts::name_curves(RunCurves& run) {
  const auto with = [&](const QString& twin) {
    return twin.isEmpty() ? run.label : QString("%1 (coincides with %2)").arg(run.label, twin);
  };
  run.smoothed->setName(with(run.loss_twin));
  run.diverged->setName(run.label + ": loss not finite");
  run.peak->setName(with(run.memory_twin));
  run.live->setName(run.label + " live at step end");
  run.throughput_smoothed->setName(run.label);
}

void LiveCharts::add_step(int index, const StepMetrics& step) {
  RunCurves* run = curves(index);
  if (!run) return;
  const double x = static_cast<double>(step.step + 1);
  if (std::isfinite(step.loss)) {
    run->loss->addData(x, step.loss);
    run->smoothed->addData(x, run->loss_average.add(step.loss, smoothing_));
  } else {
    // A gap in both curves (QCustomPlot breaks a line at NaN), and a cross where it diverged.
    run->loss->addData(x, std::nan(""));
    run->smoothed->addData(x, std::nan(""));
    run->diverged->addData(x, run->loss_average.value());
  }
  run->peak->addData(x, step.peak_bytes / kMiB);
  run->live->addData(x, step.current_bytes / kMiB);
  run->throughput->addData(x, step.tokens_per_s);
  run->throughput_smoothed->addData(x,
                                    std::isfinite(step.tokens_per_s)
                                        ? run->throughput_average.add(step.tokens_per_s, smoothing_)
                                        : run->throughput_average.value());
  for (QCPGraph* graph : {run->smoothed, run->peak, run->throughput_smoothed}) {
    mark_lone_point(graph);
  }
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
  set_chart_title(timeline_plot_, QString(kTimelineTitle) + ": " + label);
  schedule_replot();
}

void LiveCharts::set_smoothing(double weight) {
  smoothing_ = std::clamp(weight, 0.0, 0.999);
  if (smoothing_box_->value() != smoothing_) smoothing_box_->setValue(smoothing_);
  for (auto& [index, run] : runs_) {
    run.loss_average = smooth<Smoother>(run.loss, run.smoothed, smoothing_);
    run.throughput_average = smooth<Smoother>(run.throughput, run.throughput_smoothed, smoothing_);
  }
  schedule_replot();
}

void LiveCharts::finish_run(int index, RunStatus status, const QString& message, qint64 run_id) {
  RunCurves* run = curves(index);
  if (!run) return;
  for (const auto& [other_index, other] : runs_) {
    if (other_index == index) break;  // only the runs before it: those have ended
    if (run->loss_twin.isEmpty() && same_curve(run->loss, other.loss)) {
      run->loss_twin = other.label;
      dash(run->smoothed);
    }
    if (run->memory_twin.isEmpty() && same_curve(run->peak, other.peak, kSameMemory)) {
      run->memory_twin = other.label;
      dash(run->peak);
    }
  }
  const QString ending = QString::fromStdString(to_string(status));
  if (status != RunStatus::kOk) run->ending = ending;
  // Said above the charts when it went wrong; a run the user stopped is the Stop's, which the
  // status bar says.
  if (status != RunStatus::kOk && status != RunStatus::kCancelled) {
    const QString which = run_id > 0 ? QString("Run #%1 (%2)").arg(run_id).arg(run->label)
                                     : QString("Run %1").arg(run->label);
    const QString said = message.isEmpty() ? QString() : ": " + message;
    const QString where = run->loss->dataCount() == 0 ? " before its first step" : QString();
    endings_ << which + " ended " + ending + where + said;
    update_notice();
  }
  name_curves(*run);
  update_legend();
  schedule_replot();
}

QString LiveCharts::notice_text() const { return endings_.join("\n"); }

// One line per run that did not end ok, cut at the label's width; beyond two, the second says
// how many more there are.
void LiveCharts::update_notice() {
  const QFontMetrics metrics = notice_->fontMetrics();
  const int width = std::max(40, notice_->contentsRect().width());
  QStringList lines;
  for (qsizetype i = 0; i < endings_.size() && lines.size() < 2; ++i) {
    const bool last_shown = lines.size() == 1 && endings_.size() > 2;
    lines << (last_shown ? QString("… and %1 more runs that did not end ok (hover for all)")
                               .arg(endings_.size() - 1)
                         : metrics.elidedText(endings_[i], Qt::ElideRight, width));
  }
  notice_->setText(lines.join("\n"));
  notice_->setToolTip(endings_.join("\n"));
  notice_->setVisible(!endings_.isEmpty());
}

void LiveCharts::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  if (!endings_.isEmpty()) update_notice();
}

void LiveCharts::update_legend() {
  std::vector<ChartLegend::Entry> entries;
  for (const auto& [index, run] : runs_) {
    QString text = run.label;
    if (!run.ending.isEmpty()) text += " — " + run.ending;
    if (!run.loss_twin.isEmpty() && run.loss_twin == run.memory_twin) {
      text += QString(" (loss and memory coincide with %1)").arg(run.loss_twin);
    } else {
      if (!run.loss_twin.isEmpty()) text += QString(" (loss coincides with %1)").arg(run.loss_twin);
      if (!run.memory_twin.isEmpty())
        text += QString(" (memory coincides with %1)").arg(run.memory_twin);
    }
    entries.push_back({text, run_colour(index), Qt::SolidLine, ChartLegend::Mark::kLine,
                       run.loss_twin.isEmpty() && run.memory_twin.isEmpty()
                           ? QString()
                           : "Its curves are dashed over the ones they coincide with."});
  }
  if (!runs_.empty()) {
    entries.push_back({"each step (raw)", QColor(185, 185, 185), Qt::SolidLine,
                       ChartLegend::Mark::kLine,
                       "Loss and throughput: the faint line is each step's own value"});
    entries.push_back({"smoothed", QColor(70, 70, 70), Qt::SolidLine, ChartLegend::Mark::kLine,
                       "Loss and throughput: the solid line is the moving average (Smoothing)"});
  }
  if (budget_line_) {
    entries.push_back({"budget", Qt::black, Qt::DashLine, ChartLegend::Mark::kLine,
                       "Device memory: a step that peaks above it ends its run as oom"});
  }
  legend_->set_entries(entries);
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

QStringList LiveCharts::image_files(const QString& directory, const QString& name) const {
  return chart_files({{"loss", loss_plot_},
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
