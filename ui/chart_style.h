// How every chart of the window looks and behaves: a title (elided to the chart's width, whole in
// a tooltip over it), axis labels, whole-number step ticks, mouse zoom and pan with a double-click
// reset, and saving as PNG and PDF. A chart's legend is under its plot (outside it, so it never
// hides data); a chart whose tab has a shared legend (chart_legend.h) keeps its own for exports
// only. Exports are drawn at their own size, with the legend and the whole title, whatever size
// the chart has on screen.
#pragma once

#include <QSize>
#include <QString>
#include <QStringList>
#include <vector>

class QCustomPlot;

namespace rematlab::ui {

// The plot of an exported chart; its legend's rows are added below it.
inline constexpr QSize kExportPlotSize(1000, 600);

// `x_label` "step" gives whole-number ticks (a step count has no fractions).
QCustomPlot* make_chart(const QString& title, const QString& x_label, const QString& y_label);

// Sets the chart's title (the text element above the plot); chart_title() gives it back whole.
void set_chart_title(QCustomPlot* chart, const QString& title);
QString chart_title(QCustomPlot* chart);
// The title as the chart shows it now (elided to its width).
QString shown_chart_title(QCustomPlot* chart);

// The chart's tab shows one legend for all its charts: this chart's own leaves the screen (and
// gives its room back to the plot) and is drawn only into exported images.
void use_shared_legend(QCustomPlot* chart);
// Whether the chart's legend is drawn in the chart on screen (with entries).
bool legend_on_screen(QCustomPlot* chart);

// Whether any curve or bar of the chart holds a point.
bool chart_has_data(QCustomPlot* chart);

// Forgets the axes' ranges of a chart with nothing in it, so it does not show the last ones.
void reset_empty_axes(QCustomPlot* chart);

struct NamedChart {
  const char* suffix;
  QCustomPlot* chart;
};

// DIRECTORY/NAME-SUFFIX.png and .pdf of each chart that has data: what save_charts writes.
QStringList chart_files(const std::vector<NamedChart>& charts, const QString& directory,
                        const QString& name);

// Writes DIRECTORY/NAME-SUFFIX.png and .pdf for each chart that has data (an empty chart says
// nothing), at the export size; returns the paths written.
QStringList save_charts(const std::vector<NamedChart>& charts, const QString& directory,
                        const QString& name);

}  // namespace rematlab::ui
