#include "compare_view.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <iterator>

#include "chart_style.h"
#include "common/byte_size.h"
#include "elided_label.h"
#include "live_charts.h"
#include "rank_time_chart.h"
#include "units.h"

namespace rematlab::ui {
namespace {

QString run_label(const RunRecord& run) { return QString::fromStdString(run.label()); }

// Blank, not zero, for what a run did not measure.
bool has_result(const RunRecord& run) { return run.has_result && run.result.steps_completed > 0; }

// The same value of `field` at every step, within `tolerance` of the larger (exact recomputation
// trains identically; selective under fused attention keeps what none keeps, but for a few KiB
// of RNG state): the curves hide each other. Returns, per run, the index of the first earlier
// run it coincides with, or -1.
template <typename Field>
std::vector<int> coinciding(const std::vector<RunRecord>& runs,
                            const std::map<int64_t, std::vector<StepMetrics>>& steps, Field field,
                            double tolerance) {
  auto of = [&](std::size_t i) -> const std::vector<StepMetrics>* {
    const auto found = steps.find(runs[i].id);
    // A data-parallel run's memory curves are its ranks', not its steps'.
    if (!runs[i].result.ranks.empty()) return nullptr;
    if (found == steps.end()) return nullptr;
    // A curve of nothing but zeros (a figure not measured) hides nothing worth saying.
    const bool measured = std::any_of(found->second.begin(), found->second.end(),
                                      [&](const StepMetrics& step) { return field(step) != 0.0; });
    return measured ? &found->second : nullptr;
  };
  std::vector<int> same(runs.size(), -1);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto* mine = of(i);
    for (std::size_t j = 0; mine && j < i && same[i] < 0; ++j) {
      const auto* theirs = of(j);
      if (!theirs || theirs->size() != mine->size()) continue;
      const bool equal = std::equal(
          mine->begin(), mine->end(), theirs->begin(), [&](const auto& a, const auto& b) {
            const double x = field(a), y = field(b);
            const double allowed = tolerance * std::max(std::abs(x), std::abs(y));
            return a.step == b.step &&
                   (std::abs(x - y) <= allowed || (std::isnan(x) && std::isnan(y)));
          });
      if (equal) same[i] = same[j] >= 0 ? same[j] : static_cast<int>(j);
    }
  }
  return same;
}

QString ratio_text(const std::optional<double>& ratio) {
  return ratio ? QString("×%1").arg(*ratio, 0, 'f', 3) : "–";
}

void fill_bar_chart(QCustomPlot* chart, const std::vector<RunRecord>& runs,
                    const std::vector<double>& values) {
  chart->clearPlottables();
  if (runs.empty()) {
    // Plain numbers again: the last comparison's "#id" ticks belong to runs no longer shown.
    chart->xAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    reset_empty_axes(chart);
    chart->replot();
    return;
  }
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    auto* bar = new QCPBars(chart->xAxis, chart->yAxis);  // owned by the chart
    bar->setWidth(0.7);
    bar->setPen(Qt::NoPen);
    bar->setBrush(run_colour(static_cast<int>(i)));
    bar->removeFromLegend();  // the axis names each bar; an unseen legend would still take room
    if (std::isfinite(values[i])) bar->addData(static_cast<double>(i + 1), values[i]);
    ticker->addTick(static_cast<double>(i + 1), QString("#%1").arg(runs[i].id));
  }
  chart->xAxis->setTicker(ticker);
  chart->xAxis->setRange(0.3, static_cast<double>(runs.size()) + 0.7);
  double top = 0.0;
  for (double v : values) {
    if (std::isfinite(v)) top = std::max(top, v);
  }
  chart->yAxis->setRange(0.0, top > 0 ? top * 1.1 : 1.0);
  chart->replot();
}

}  // namespace

CompareView::CompareView(QWidget* parent)
    : QWidget(parent),
      baseline_(new QComboBox),
      warnings_(new QLabel),
      coincide_(new ElidedLabel),
      table_(new QTableWidget),
      memory_bars_(make_chart("Peak activation memory", "run", "MiB")),
      throughput_bars_(make_chart("Throughput", "run", "tokens/s")),
      scatter_(
          make_chart("Memory against throughput (dashed: the Pareto front; hollow: did not finish)",
                     "peak MiB", "tokens/s")),
      losses_(make_chart("Loss", "step", "nats/token")),
      step_memory_(
          make_chart("Peak memory per step (a curve per rank: solid rank 0, dashed 1, dotted 2)",
                     "step", "MiB")),
      rank_time_(make_chart("Where each rank's step went (other: waits on tensor and data ranks)",
                            "run and rank", "ms")) {
  // A long run name must not widen the window: the list is as wide as the layout allows.
  baseline_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  baseline_->setMinimumContentsLength(16);
  // The table is the tab's legend: each run in its colour, with its swatch, named once; what
  // line styles and markers mean is in the titles. The charts' own legends are for exports.
  for (QCustomPlot* chart : {scatter_, losses_, step_memory_}) use_shared_legend(chart);
  // Peaks in MiB have wide labels ("10.25") under a narrow chart: fewer of them, or they collide.
  scatter_->xAxis->ticker()->setTickCount(3);
  scatter_->xAxis->ticker()->setTickStepStrategy(QCPAxisTicker::tssMeetTickCount);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->verticalHeader()->hide();
  table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 8);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  // As tall as its rows, no taller: the charts below get the rest of the height.
  table_->setSizeAdjustPolicy(QAbstractScrollArea::AdjustToContents);
  table_->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Maximum);
  // Two lines each at most (the whole in the tooltip): on a small screen the charts keep room.
  cap_lines(warnings_, 2);
  warnings_->setStyleSheet("color: #8a4b00;");
  warnings_->hide();
  coincide_->hide();
  auto* top = new QHBoxLayout;
  top->addWidget(new QLabel("Baseline"));
  top->addWidget(baseline_, 1);
  auto* charts = new QGridLayout;
  // Two rows whatever the number of charts: a third row would push the window past a 720 px
  // screen and squeeze every plot under its legend.
  // Three charts a row.
  charts->addWidget(memory_bars_, 0, 0);
  charts->addWidget(throughput_bars_, 0, 1);
  charts->addWidget(step_memory_, 0, 2);
  charts->addWidget(scatter_, 1, 0);
  charts->addWidget(losses_, 1, 1);
  charts->addWidget(rank_time_, 1, 2);
  for (int column = 0; column < 3; ++column) charts->setColumnStretch(column, 1);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(top);
  layout->addWidget(warnings_);
  layout->addWidget(coincide_);
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
  for (const RunRecord& run : runs_) {
    baseline_->addItem(run_label(run));
    baseline_->setItemData(baseline_->count() - 1, run_label(run), Qt::ToolTipRole);
  }
  rebuild();
}

void CompareView::remove_runs(const QList<qint64>& ids) {
  std::vector<RunRecord> kept;
  for (RunRecord& run : runs_) {
    if (!ids.contains(run.id)) kept.push_back(std::move(run));
  }
  if (kept.size() == runs_.size()) return;
  for (qint64 id : ids) steps_.erase(id);
  set_runs(std::move(kept), std::move(steps_));
}

void CompareView::set_baseline(int index) { baseline_->setCurrentIndex(index); }

QString CompareView::warnings_text() const { return warnings_->text(); }
QString CompareView::coincide_text() const { return coincide_lines_.join("\n"); }

void CompareView::rebuild() {
  comparison_ =
      compare_runs(runs_, static_cast<std::size_t>(std::max(0, baseline_->currentIndex())));
  QStringList warnings;
  for (const std::string& warning : comparison_.warnings)
    warnings << QString::fromStdString(warning);
  set_capped_text(warnings_, warnings.join("\n"));
  coinciding_ = coinciding(
      runs_, steps_, [](const StepMetrics& s) { return s.loss; }, 0.0);
  // Memory within half a percent: less than a pixel apart, the curves hide each other.
  same_memory_ = coinciding(
      runs_, steps_, [](const StepMetrics& s) { return static_cast<double>(s.peak_bytes); }, 0.005);
  QStringList coincide;
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    const int loss = coinciding_[i], memory = same_memory_[i];
    const auto id = [&](int index) { return runs_[static_cast<std::size_t>(index)].id; };
    if (loss >= 0 && loss == memory) {
      coincide << QString(
                      "#%1 has exactly the loss of #%2, and its peak memory at every step: its "
                      "curves (dashed) lie on top of them.")
                      .arg(runs_[i].id)
                      .arg(id(loss));
      continue;
    }
    if (loss >= 0) {
      coincide << QString("#%1 has exactly the loss of #%2: its curve (dashed) lies on top of it.")
                      .arg(runs_[i].id)
                      .arg(id(loss));
    }
    if (memory >= 0) {
      coincide << QString(
                      "#%1 has the peak memory of #%2 at every step (within 0.5 %): its memory "
                      "curve (dashed) lies on top of it.")
                      .arg(runs_[i].id)
                      .arg(id(memory));
    }
  }
  // One line, each coincidence after the other (all of them, one a line, in the tooltip).
  coincide_lines_ = coincide;
  coincide_->setText(coincide.join("  "));
  coincide_->set_description(coincide.join("\n"));
  coincide_->setVisible(!coincide.isEmpty());
  fill_table();
  fill_bars();
  fill_scatter();
  fill_losses();
  fill_step_memory();
  fill_rank_time_chart(rank_time_, runs_);
  fit_table();
}

void CompareView::fill_table() {
  const QStringList headers = {"run",         "status",   "model",    "batch",
                               "peak",        "peak act", "tokens/s", "peak ×base",
                               "tok/s ×base", "MFU",      "HFU",      "final loss"};
  table_->clear();
  table_->setColumnCount(static_cast<int>(headers.size()));
  table_->setHorizontalHeaderLabels(headers);
  table_->setRowCount(static_cast<int>(runs_.size()));
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    const RunRecord& run = runs_[i];
    const RunResult& r = run.result;
    const bool has = has_result(run);
    auto blank_or = [has](const QString& text) { return has ? text : QString(); };
    const QStringList cells = {
        run_label(run), QString::fromStdString(to_string(run.status)),
        QString::fromStdString(describe_model(run.config)),
        run.config.batch > 0 ? QString::number(run.config.batch) : QString(),
        blank_or(QString::fromStdString(format_bytes(r.peak_bytes))),
        blank_or(QString::fromStdString(format_bytes(r.peak_activation_bytes))),
        blank_or(QString::number(r.tokens_per_s, 'f', 0)),
        ratio_text(comparison_.ratio(i, "peak_bytes")),
        ratio_text(comparison_.ratio(i, "tokens_per_s")),
        // Model FLOPs against the peak kept for this device; HFU counts recomputation too.
        // Blank where none was computed (a run that timed no step).
        r.model_flops > 0.0 ? blank_or(QString("%1%").arg(100.0 * r.mfu, 0, 'f', 1)) : QString(),
        r.model_flops > 0.0 ? blank_or(QString("%1%").arg(100.0 * r.hfu, 0, 'f', 1)) : QString(),
        blank_or(QString::number(r.final_loss, 'f', 4))};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      item->setForeground(c == 0 ? run_colour(static_cast<int>(i))
                                 : table_->palette().text().color());
      if (c == 0) item->setData(Qt::DecorationRole, run_colour(static_cast<int>(i)));
      if (!run.message.empty()) item->setToolTip(QString::fromStdString(run.message));
      if (c == 9 || c == 10) {
        item->setToolTip(QString("peak %1 GFLOP/s: %2")
                             .arg(r.peak_flops / 1e9, 0, 'f', 1)
                             .arg(QString::fromStdString(r.peak_flops_source)));
      }
      table_->setItem(static_cast<int>(i), c, item);
    }
  }
}

void CompareView::fill_bars() {
  std::vector<double> activation, throughput;
  for (const RunRecord& run : runs_) {
    const bool has = has_result(run);
    activation.push_back(has ? static_cast<double>(run.result.peak_activation_bytes) / kMiB : NAN);
    throughput.push_back(has ? run.result.tokens_per_s : NAN);
  }
  fill_bar_chart(memory_bars_, runs_, activation);
  fill_bar_chart(throughput_bars_, runs_, throughput);
}

void CompareView::fill_scatter() {
  scatter_->clearGraphs();
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    if (!has_result(runs_[i])) continue;
    const bool finished = runs_[i].status == RunStatus::kOk;
    QCPGraph* point = scatter_->addGraph();
    // A run that did not finish is a hollow marker and says so: it is not a policy's result.
    point->setName(
        run_label(runs_[i]) +
        (finished ? "" : QString(" (%1)").arg(QString::fromStdString(to_string(runs_[i].status)))));
    point->setLineStyle(QCPGraph::lsNone);
    const QColor colour = run_colour(static_cast<int>(i));
    point->setScatterStyle(finished ? QCPScatterStyle(QCPScatterStyle::ssDisc, colour, colour, 9)
                                    : QCPScatterStyle(QCPScatterStyle::ssCircle, colour, 9));
    point->addData(static_cast<double>(runs_[i].result.peak_bytes) / kMiB,
                   runs_[i].result.tokens_per_s);
  }
  QCPGraph* front_line = scatter_->addGraph();
  front_line->setName("Pareto front");
  front_line->setPen(QPen(Qt::black, 1.0, Qt::DashLine));
  front_line->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, Qt::black, 14));
  for (std::size_t i : comparison_.pareto_front) {
    front_line->addData(static_cast<double>(runs_[i].result.peak_bytes) / kMiB,
                        runs_[i].result.tokens_per_s);
  }
  if (comparison_.pareto_front.empty()) scatter_->removeGraph(front_line);
  if (chart_has_data(scatter_)) {
    scatter_->rescaleAxes();
    scatter_->xAxis->scaleRange(1.2);
    scatter_->yAxis->scaleRange(1.2);
  } else {
    reset_empty_axes(scatter_);
  }
  scatter_->replot();
}

void CompareView::fill_losses() {
  losses_->clearGraphs();
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    QCPGraph* curve = losses_->addGraph();
    const int same = coinciding_[i];
    // A curve that lies exactly on an earlier one is dashed and says so: not a missing run.
    curve->setName(same < 0 ? run_label(runs_[i])
                            : QString("%1 (coincides with #%2)")
                                  .arg(run_label(runs_[i]))
                                  .arg(runs_[static_cast<std::size_t>(same)].id));
    curve->setPen(QPen(run_colour(static_cast<int>(i)), 1.0,  // width 1: Qt's fast line path
                       same < 0 ? Qt::SolidLine : Qt::DashLine));
    curve->setAdaptiveSampling(true);
    const auto found = steps_.find(runs_[i].id);
    if (found == steps_.end()) continue;
    // A non-finite loss stays NaN: QCustomPlot leaves a gap there rather than a false value.
    for (const StepMetrics& step : found->second) {
      curve->addData(static_cast<double>(step.step + 1),
                     std::isfinite(step.loss) ? step.loss : std::nan(""));
    }
  }
  const bool loads = add_expert_loads();
  if (chart_has_data(losses_)) {
    losses_->rescaleAxes();
    const QCPRange range = losses_->yAxis->range();  // a margin: no point drawn on the axis
    const double margin = std::max(range.size() * 0.05, 1e-3);
    losses_->yAxis->setRange(range.lower - margin, range.upper + margin);
    if (loads) {
      const QCPRange load = losses_->yAxis2->range();  // 1 (balanced) always in sight
      losses_->yAxis2->setRange(std::min(1.0, load.lower) - 0.05, load.upper * 1.05);
    }
  } else {
    reset_empty_axes(losses_);
  }
  losses_->replot();
}

bool CompareView::add_expert_loads() {
  bool any = false;
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    const auto found = steps_.find(runs_[i].id);
    if (found == steps_.end()) continue;
    QCPGraph* curve = nullptr;
    for (const StepMetrics& step : found->second) {
      if (!std::isfinite(step.expert_load)) continue;
      if (!curve) {
        curve = losses_->addGraph(losses_->xAxis, losses_->yAxis2);
        curve->setName(QString("%1 expert load").arg(run_label(runs_[i])));
        curve->setPen(QPen(run_colour(static_cast<int>(i)), 1.0, Qt::DotLine));
        curve->removeFromLegend();  // the table names the run; the axis says what it is
      }
      curve->addData(static_cast<double>(step.step + 1), step.expert_load);
    }
    any = any || curve != nullptr;
  }
  // A mixture of experts' busiest expert, over its share, on the right: how far each step's
  // routing strayed from balanced (1), which the experts' activations must make room for.
  losses_->yAxis2->setVisible(any);
  losses_->yAxis2->setLabel(any ? "expert load (dotted)" : QString());
  return any;
}

void CompareView::fill_step_memory() {
  step_memory_->clearGraphs();
  auto add_curve = [&](std::size_t run, QString name, Qt::PenStyle style,
                       const std::vector<int64_t>& peaks) {
    QCPGraph* curve = step_memory_->addGraph();
    curve->setName(name);
    curve->setPen(QPen(run_colour(static_cast<int>(run)), 1.0, style));
    curve->setAdaptiveSampling(true);
    for (std::size_t step = 0; step < peaks.size(); ++step) {
      curve->addData(static_cast<double>(step + 1), static_cast<double>(peaks[step]) / kMiB);
    }
  };
  // Ranks of one run share its colour and differ by their dash: their memory differs by what
  // each holds (its shard), which is what the chart is there to show.
  static const Qt::PenStyle kRankStyles[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine,
                                             Qt::DashDotLine, Qt::DashDotDotLine};
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    const std::vector<RankResult>& ranks = runs_[i].result.ranks;
    if (!ranks.empty()) {
      for (const RankResult& rank : ranks) {
        add_curve(i, run_label(runs_[i]) + QString(" rank %1").arg(rank.rank),
                  kRankStyles[static_cast<std::size_t>(rank.rank) % std::size(kRankStyles)],
                  rank.step_peak_bytes);
      }
      continue;
    }
    const auto found = steps_.find(runs_[i].id);
    if (found == steps_.end()) continue;
    std::vector<int64_t> peaks;
    for (const StepMetrics& step : found->second) peaks.push_back(step.peak_bytes);
    const int same = same_memory_[i];
    // Dashed over the curve it repeats, and named so: not a missing run.
    add_curve(i,
              same < 0 ? run_label(runs_[i])
                       : QString("%1 (coincides with #%2)")
                             .arg(run_label(runs_[i]))
                             .arg(runs_[static_cast<std::size_t>(same)].id),
              same < 0 ? Qt::SolidLine : Qt::DashLine, peaks);
  }
  if (chart_has_data(step_memory_)) {
    step_memory_->rescaleAxes();
  } else {
    reset_empty_axes(step_memory_);
  }
  step_memory_->replot();
}

// As tall as its rows, up to a quarter of the tab (it scrolls beyond): the charts keep the rest.
void CompareView::fit_table() {
  const int rows = table_->horizontalHeader()->height() + 2 * table_->frameWidth() +
                   table_->verticalHeader()->length();
  const int row = table_->verticalHeader()->defaultSectionSize();
  table_->setMaximumHeight(std::clamp(height() / 4, 3 * row, std::max(3 * row, rows + 2)));
}

void CompareView::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  fit_table();
}

std::vector<NamedChart> CompareView::named_charts() const {
  return {{"activation", memory_bars_},  {"throughput", throughput_bars_},
          {"pareto", scatter_},          {"loss", losses_},
          {"step-memory", step_memory_}, {"rank-time", rank_time_}};
}

QStringList CompareView::image_files(const QString& directory, const QString& name) const {
  return chart_files(named_charts(), directory, name);
}

QStringList CompareView::export_images(const QString& directory, const QString& name) const {
  return save_charts(named_charts(), directory, name);
}

}  // namespace rematlab::ui
