#include "chart_style.h"

#include <qcustomplot.h>

#include <QDir>

namespace rematlab::ui {

QCustomPlot* make_chart(const QString& title, const QString& x_label, const QString& y_label) {
  auto* chart = new QCustomPlot;
  chart->plotLayout()->insertRow(0);
  chart->plotLayout()->addElement(0, 0,
                                  new QCPTextElement(chart, title, QFont("sans", 10, QFont::Bold)));
  chart->xAxis->setLabel(x_label);
  chart->yAxis->setLabel(y_label);
  chart->legend->setVisible(false);  // shown once there are curves
  chart->legend->setFont(QFont("sans", 8));
  chart->legend->setBrush(QColor(255, 255, 255, 200));
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

QStringList save_charts(const std::vector<NamedChart>& charts, const QString& directory,
                        const QString& name) {
  QStringList written;
  for (const NamedChart& named : charts) {
    const QString base = QDir(directory).filePath(name + "-" + named.suffix);
    if (named.chart->savePng(base + ".png", 0, 0, 2.0)) written << base + ".png";
    if (named.chart->savePdf(base + ".pdf")) written << base + ".pdf";
  }
  return written;
}

}  // namespace rematlab::ui
