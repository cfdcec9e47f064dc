// How every chart of the window looks and behaves: a title, axis labels, a small legend, mouse
// zoom and pan with a double-click reset, and saving as PNG and PDF.
#pragma once

#include <QString>
#include <QStringList>
#include <vector>

class QCustomPlot;

namespace rematlab::ui {

QCustomPlot* make_chart(const QString& title, const QString& x_label, const QString& y_label);
struct NamedChart {
  const char* suffix;
  QCustomPlot* chart;
};

// Writes DIRECTORY/NAME-SUFFIX.png and .pdf for each chart; returns the paths written.
QStringList save_charts(const std::vector<NamedChart>& charts, const QString& directory,
                        const QString& name);

}  // namespace rematlab::ui
