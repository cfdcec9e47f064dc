#include "chart_style.h"

#include <qcustomplot.h>

#include <QDir>

namespace rematlab::ui {
namespace {

// QCustomPlot reads a maximum of QWIDGETSIZE_MAX or more (margins included) as "not set" and falls
// back to the element's own hint: a million pixels is unbounded and still counts as set.
constexpr int kUnbounded = 1 << 20;

// As many legend columns as the chart's width holds for its widest entry; QCPLegend places its
// entries by the wrap only when told to rearrange them.
void fit_legend(QCustomPlot* chart) {
  QCPLegend* legend = chart->legend;
  int widest = 1;
  for (int i = 0; i < legend->itemCount(); ++i) {
    // A cell of the grid may be empty (the last row of a wrapped legend); the size hint is
    // public on the base class.
    if (const QCPLayoutElement* item = legend->item(i))
      widest = std::max(widest, item->minimumOuterSizeHint().width());
  }
  const int room = chart->width() - legend->margins().left() - legend->margins().right();
  const int columns =
      std::max(1, (room + legend->columnSpacing()) / (widest + legend->columnSpacing()));
  if (columns != legend->wrap()) {
    legend->setWrap(columns);
    legend->setFillOrder(legend->fillOrder(), /*rearrange=*/true);
  }
}

}  // namespace

QCustomPlot* make_chart(const QString& title, const QString& x_label, const QString& y_label) {
  auto* chart = new QCustomPlot;
  chart->plotLayout()->insertRow(0);
  chart->plotLayout()->addElement(0, 0,
                                  new QCPTextElement(chart, title, QFont("sans", 10, QFont::Bold)));
  chart->xAxis->setLabel(x_label);
  chart->yAxis->setLabel(y_label);
  // The legend lives in its own row under the axes, not inside them: it can never cover a point.
  // An empty legend takes no room (a hidden one with entries would still take its rows).
  chart->axisRect()->insetLayout()->take(chart->legend);
  chart->plotLayout()->addElement(2, 0, chart->legend);
  chart->plotLayout()->setRowStretchFactor(2, 0.001);
  chart->plotLayout()->setRowSpacing(0);
  // A grid column is as narrow as the narrowest maximum in it, and an empty legend's maximum is
  // its margins: unbounded, the axes above keep the chart's width when there are no curves.
  chart->legend->setMaximumSize(kUnbounded, kUnbounded);
  chart->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
  chart->legend->setWrap(3);
  chart->legend->setVisible(false);  // shown once there are curves
  chart->legend->setFont(QFont("sans", 8));
  chart->legend->setBorderPen(Qt::NoPen);
  chart->legend->setMargins(QMargins(4, 0, 4, 2));
  // Refitted before every replot: new entries, and a resize (which replots), both change it.
  QObject::connect(chart, &QCustomPlot::beforeReplot, chart, [chart] { fit_legend(chart); });
  if (x_label == "step") {
    QSharedPointer<QCPAxisTickerFixed> whole(new QCPAxisTickerFixed);
    whole->setTickStep(1.0);
    whole->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);  // 1, 2, 5, 10 … steps apart
    chart->xAxis->setTicker(whole);
  }
  chart->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  chart->setPlottingHints(QCP::phFastPolylines | QCP::phCacheLabels);
  chart->setMinimumHeight(180);
  // Double-click resets the view to the data.
  QObject::connect(chart, &QCustomPlot::mouseDoubleClick, chart, [chart](QMouseEvent*) {
    chart->rescaleAxes();
    chart->replot();
  });
  return chart;
}

void set_chart_title(QCustomPlot* chart, const QString& title) {
  if (auto* text = qobject_cast<QCPTextElement*>(chart->plotLayout()->element(0, 0))) {
    text->setText(title);
  }
}

bool chart_has_data(QCustomPlot* chart) {
  for (int i = 0; i < chart->plottableCount(); ++i) {
    const QCPAbstractPlottable* plottable = chart->plottable(i);
    if (const auto* graph = qobject_cast<const QCPGraph*>(plottable)) {
      if (graph->dataCount() > 0) return true;
    } else if (const auto* bars = qobject_cast<const QCPBars*>(plottable)) {
      if (bars->dataCount() > 0) return true;
    }
  }
  return false;
}

void reset_empty_axes(QCustomPlot* chart) {
  if (chart_has_data(chart)) return;
  chart->xAxis->setRange(0.0, 1.0);
  chart->yAxis->setRange(0.0, 1.0);
  chart->legend->setVisible(false);
}

QStringList save_charts(const std::vector<NamedChart>& charts, const QString& directory,
                        const QString& name) {
  QStringList written;
  for (const NamedChart& named : charts) {
    if (!chart_has_data(named.chart)) continue;
    const QString base = QDir(directory).filePath(name + "-" + named.suffix);
    if (named.chart->savePng(base + ".png", 0, 0, 2.0)) written << base + ".png";
    if (named.chart->savePdf(base + ".pdf")) written << base + ".pdf";
  }
  return written;
}

}  // namespace rematlab::ui
