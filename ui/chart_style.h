// How every chart of the window looks and behaves: a title, axis labels, a legend under the plot
// (outside it, so it never hides data, also in exported images), whole-number step ticks, mouse
// zoom and pan with a double-click reset, and saving as PNG and PDF.
#pragma once

#include <QString>
#include <QStringList>
#include <vector>

class QCustomPlot;

namespace rematlab::ui {

// `x_label` "step" gives whole-number ticks (a step count has no fractions).
QCustomPlot* make_chart(const QString& title, const QString& x_label, const QString& y_label);

// Sets the chart's title (the text element above the plot).
void set_chart_title(QCustomPlot* chart, const QString& title);

// Whether any curve or bar of the chart holds a point.
bool chart_has_data(QCustomPlot* chart);

// Forgets the axes' ranges of a chart with nothing in it, so it does not show the last ones.
void reset_empty_axes(QCustomPlot* chart);

struct NamedChart {
  const char* suffix;
  QCustomPlot* chart;
};

// Writes DIRECTORY/NAME-SUFFIX.png and .pdf for each chart that has data (an empty chart says
// nothing); returns the paths written.
QStringList save_charts(const std::vector<NamedChart>& charts, const QString& directory,
                        const QString& name);

}  // namespace rematlab::ui
