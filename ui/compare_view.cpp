#include "compare_view.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>

#include "chart_style.h"
#include "common/byte_size.h"
#include "live_charts.h"

namespace rematlab::ui {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double summary_value(const RunRecord& run, const char* key) {
  const auto& s = run.summary;
  return s.is_object() && s.contains(key) && s.at(key).is_number() ? s.at(key).get<double>() : 0.0;
}

QString ratio_text(double value, double baseline) {
  return baseline > 0.0 ? QString("×%1").arg(value / baseline, 0, 'f', 3) : "–";
}

QString run_label(const RunRecord& run) {
  return QString("#%1 %2").arg(run.id).arg(QString::fromStdString(run.name));
}

void fill_bars(QCustomPlot* chart, const std::vector<RunRecord>& runs,
               const std::vector<double>& values) {
  chart->clearPlottables();
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    auto* bar = new QCPBars(chart->xAxis, chart->yAxis);  // owned by the chart
    bar->setWidth(0.7);
    bar->setPen(Qt::NoPen);
    bar->setBrush(run_colour(static_cast<int>(i)));
    bar->addData(static_cast<double>(i + 1), values[i]);
    ticker->addTick(static_cast<double>(i + 1), QString("#%1").arg(runs[i].id));
  }
  chart->xAxis->setTicker(ticker);
  chart->xAxis->setRange(0.3, static_cast<double>(runs.size()) + 0.7);
  double top = 0.0;
  for (double v : values) top = std::max(top, v);
  chart->yAxis->setRange(0.0, top > 0 ? top * 1.1 : 1.0);
  chart->replot();
}

}  // namespace

CompareView::CompareView(QWidget* parent)
    : QWidget(parent),
      baseline_(new QComboBox),
      table_(new QTableWidget),
      memory_bars_(make_chart("Peak activation memory", "run", "MiB")),
      throughput_bars_(make_chart("Throughput", "run", "tokens/s")),
      scatter_(make_chart("Memory against throughput (Pareto front joined)", "peak MiB", "tokens/s")),
      losses_(make_chart("Loss", "step", "nats/token")) {
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  auto* top = new QHBoxLayout;
  top->addWidget(new QLabel("Baseline"));
  top->addWidget(baseline_, 1);
  auto* charts = new QGridLayout;
  charts->addWidget(memory_bars_, 0, 0);
  charts->addWidget(throughput_bars_, 0, 1);
  charts->addWidget(scatter_, 1, 0);
  charts->addWidget(losses_, 1, 1);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(top);
  layout->addWidget(table_);
  layout->addLayout(charts, 1);
  connect(baseline_, &QComboBox::currentIndexChanged, this, &CompareView::rebuild);
}

void CompareView::set_runs(std::vector<RunRecord> runs,
                           std::map<int64_t, std::vector<StepMetrics>> steps) {
  runs_ = std::move(runs);
  steps_ = std::move(steps);
  const QSignalBlocker blocker(baseline_);
  baseline_->clear();
  for (const RunRecord& run : runs_) baseline_->addItem(run_label(run));
  rebuild();
}

void CompareView::set_baseline(int index) { baseline_->setCurrentIndex(index); }

std::vector<int> CompareView::pareto_front() const {
  std::vector<int> front;
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    const double memory = summary_value(runs_[i], "peak_bytes");
    const double speed = summary_value(runs_[i], "tokens_per_s");
    bool dominated = false;
    for (std::size_t j = 0; j < runs_.size() && !dominated; ++j) {
      const double other_memory = summary_value(runs_[j], "peak_bytes");
      const double other_speed = summary_value(runs_[j], "tokens_per_s");
      dominated = j != i && other_memory <= memory && other_speed >= speed &&
                  (other_memory < memory || other_speed > speed);
    }
    if (!dominated && speed > 0.0) front.push_back(static_cast<int>(i));
  }
  return front;
}

void CompareView::rebuild() {
  const int base = std::max(0, baseline_->currentIndex());
  const QStringList headers = {"run",      "status",    "batch",     "peak",
                               "peak act", "tokens/s",  "peak ×base", "tok/s ×base",
                               "MFU",      "HFU",        "final loss"};
  table_->clear();
  table_->setColumnCount(static_cast<int>(headers.size()));
  table_->setHorizontalHeaderLabels(headers);
  table_->setRowCount(static_cast<int>(runs_.size()));
  std::vector<double> activation, throughput;
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    const RunRecord& run = runs_[i];
    const RunRecord& baseline = runs_[static_cast<std::size_t>(base)];
    const double mfu = summary_value(run, "mfu");  // model FLOPs against the measured peak
    const double hfu = summary_value(run, "hfu");  // recomputation included
    const QStringList cells = {
        run_label(run),
        QString::fromStdString(run.status),
        QString::number(run.config.value("batch", int64_t{0})),
        QString::fromStdString(format_bytes(static_cast<int64_t>(summary_value(run, "peak_bytes")))),
        QString::fromStdString(format_bytes(static_cast<int64_t>(summary_value(run, "peak_activation_bytes")))),
        QString::number(summary_value(run, "tokens_per_s"), 'f', 0),
        ratio_text(summary_value(run, "peak_bytes"), summary_value(baseline, "peak_bytes")),
        ratio_text(summary_value(run, "tokens_per_s"), summary_value(baseline, "tokens_per_s")),
        mfu > 0.0 ? QString("%1%").arg(100.0 * mfu, 0, 'f', 1) : "–",
        hfu > 0.0 ? QString("%1%").arg(100.0 * hfu, 0, 'f', 1) : "–",
        QString::number(summary_value(run, "final_loss"), 'f', 4)};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      item->setForeground(c == 0 ? run_colour(static_cast<int>(i)) : table_->palette().text().color());
      table_->setItem(static_cast<int>(i), c, item);
    }
    activation.push_back(summary_value(run, "peak_activation_bytes") / kMiB);
    throughput.push_back(summary_value(run, "tokens_per_s"));
  }
  fill_bars(memory_bars_, runs_, activation);
  fill_bars(throughput_bars_, runs_, throughput);

  scatter_->clearGraphs();
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    QCPGraph* point = scatter_->addGraph();
    point->setName(run_label(runs_[i]));
    point->setLineStyle(QCPGraph::lsNone);
    point->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, run_colour(static_cast<int>(i)),
                                           run_colour(static_cast<int>(i)), 9));
    point->addData(summary_value(runs_[i], "peak_bytes") / kMiB, summary_value(runs_[i], "tokens_per_s"));
  }
  std::vector<int> front = pareto_front();
  std::sort(front.begin(), front.end(), [&](int a, int b) {
    return summary_value(runs_[a], "peak_bytes") < summary_value(runs_[b], "peak_bytes");
  });
  QCPGraph* front_line = scatter_->addGraph();
  front_line->setName("Pareto front");
  front_line->setPen(QPen(Qt::black, 1.0, Qt::DashLine));
  front_line->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, Qt::black, 14));
  for (int i : front) {
    front_line->addData(summary_value(runs_[i], "peak_bytes") / kMiB, summary_value(runs_[i], "tokens_per_s"));
  }
  scatter_->legend->setVisible(!runs_.empty());
  // More memory and less throughput is the dominated corner: the legend hides nothing there.
  scatter_->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignBottom | Qt::AlignRight);
  scatter_->rescaleAxes();
  scatter_->xAxis->scaleRange(1.2);
  scatter_->yAxis->scaleRange(1.2);
  scatter_->replot();

  losses_->clearGraphs();
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    QCPGraph* curve = losses_->addGraph();
    curve->setName(run_label(runs_[i]));
    curve->setPen(QPen(run_colour(static_cast<int>(i)), 1.0));  // width 1: Qt's fast line path
    curve->setAdaptiveSampling(true);
    const auto found = steps_.find(runs_[i].id);
    if (found == steps_.end()) continue;
    for (const StepMetrics& step : found->second) {
      curve->addData(static_cast<double>(step.step + 1), step.loss);
    }
  }
  losses_->legend->setVisible(!runs_.empty());
  losses_->rescaleAxes();
  losses_->replot();
}

QStringList CompareView::export_images(const QString& directory, const QString& name) const {
  return save_charts({{"activation", memory_bars_},
                      {"throughput", throughput_bars_},
                      {"pareto", scatter_},
                      {"loss", losses_}},
                     directory, name);
}

}  // namespace rematlab::ui
