#include "live_charts.h"

#include <qcustomplot.h>

#include <QVBoxLayout>

namespace rematlab::ui {
namespace {

constexpr int kReplotIntervalMs = 33;  // at most ~30 replots a second
constexpr double kMiB = 1024.0 * 1024.0;

QColor run_colour(std::size_t index) {
  static const QColor kPalette[] = {QColor(0x1f, 0x77, 0xb4), QColor(0xd6, 0x27, 0x28),
                                    QColor(0x2c, 0xa0, 0x2c), QColor(0xff, 0x7f, 0x0e),
                                    QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b)};
  return kPalette[index % (sizeof kPalette / sizeof kPalette[0])];
}

QCustomPlot* make_plot(const QString& title, const QString& y_label) {
  auto* plot = new QCustomPlot;
  plot->plotLayout()->insertRow(0);
  plot->plotLayout()->addElement(0, 0, new QCPTextElement(plot, title, QFont("sans", 10, QFont::Bold)));
  plot->xAxis->setLabel("step");
  plot->yAxis->setLabel(y_label);
  plot->legend->setVisible(false);  // shown once a run has curves
  plot->legend->setFont(QFont("sans", 8));
  plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  plot->setMinimumHeight(160);
  // Double-click resets the view to the data.
  QObject::connect(plot, &QCustomPlot::mouseDoubleClick, plot, [plot](QMouseEvent*) {
    plot->rescaleAxes();
    plot->replot();
  });
  return plot;
}

QCPGraph* add_graph(QCustomPlot* plot, const QString& name, QColor colour, Qt::PenStyle style) {
  QCPGraph* graph = plot->addGraph();
  graph->setName(name);
  graph->setPen(QPen(colour, 1.5, style));
  graph->setAdaptiveSampling(true);  // keeps 100k-point curves fluid
  return graph;
}

}  // namespace

LiveCharts::LiveCharts(QWidget* parent)
    : QWidget(parent),
      loss_plot_(make_plot("Loss", "nats/token")),
      memory_plot_(make_plot("Device memory", "MiB")),
      throughput_plot_(make_plot("Throughput", "tokens/s")) {
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(loss_plot_);
  layout->addWidget(memory_plot_);
  layout->addWidget(throughput_plot_);
  replot_timer_.setSingleShot(true);
  replot_timer_.setInterval(kReplotIntervalMs);
  connect(&replot_timer_, &QTimer::timeout, this, &LiveCharts::replot_now);
}

void LiveCharts::begin_run(const QString& label, double budget_bytes) {
  const QColor colour = run_colour(runs_.size());
  RunCurves curves;
  curves.loss = add_graph(loss_plot_, label, colour.lighter(150), Qt::SolidLine);
  curves.smoothed = add_graph(loss_plot_, label + " (smoothed)", colour, Qt::SolidLine);
  curves.peak = add_graph(memory_plot_, label + " peak", colour, Qt::SolidLine);
  curves.live = add_graph(memory_plot_, label + " live at step end", colour, Qt::DotLine);
  curves.throughput = add_graph(throughput_plot_, label, colour, Qt::SolidLine);
  runs_.push_back(curves);
  for (QCustomPlot* plot : {loss_plot_, memory_plot_, throughput_plot_}) plot->legend->setVisible(true);
  if (budget_line_) {
    memory_plot_->removeGraph(budget_line_);
    budget_line_ = nullptr;
  }
  if (budget_bytes > 0) {
    budget_line_ = add_graph(memory_plot_, "budget", Qt::black, Qt::DashLine);
    budget_line_->setData({0.0, 1.0}, {budget_bytes / kMiB, budget_bytes / kMiB});
  }
  schedule_replot();
}

void LiveCharts::add_step(const StepMetrics& step) {
  if (runs_.empty()) return;
  RunCurves& curves = runs_.back();
  const double x = static_cast<double>(step.step + 1);
  curves.ema = curves.has_ema ? smoothing_ * curves.ema + (1.0 - smoothing_) * step.loss : step.loss;
  curves.has_ema = true;
  curves.loss->addData(x, step.loss);
  curves.smoothed->addData(x, curves.ema);
  curves.peak->addData(x, step.peak_bytes / kMiB);
  curves.live->addData(x, step.current_bytes / kMiB);
  curves.throughput->addData(x, step.tokens_per_s);
  if (budget_line_) {
    const double level = budget_line_->data()->begin()->value;
    budget_line_->setData({0.0, x}, {level, level});
  }
  schedule_replot();
}

void LiveCharts::set_smoothing(double weight) { smoothing_ = std::clamp(weight, 0.0, 0.999); }

int LiveCharts::loss_points() const {
  return runs_.empty() ? 0 : runs_.back().loss->dataCount();
}

void LiveCharts::schedule_replot() {
  if (!replot_timer_.isActive()) replot_timer_.start();
}

void LiveCharts::replot_now() {
  for (QCustomPlot* plot : {loss_plot_, memory_plot_, throughput_plot_}) {
    plot->rescaleAxes();
    if (plot != loss_plot_) {  // bytes and rates read best from zero
      plot->yAxis->setRange(0.0, plot->yAxis->range().upper * 1.05);
    }
    plot->replot(QCustomPlot::rpQueuedReplot);
  }
  ++replots_;
}

}  // namespace rematlab::ui
