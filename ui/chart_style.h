// How every chart of the window looks and behaves: a title, axis labels, a small legend, mouse
// zoom and pan with a double-click reset, and saving as PNG and PDF.
#pragma once

#include <QString>
#include <QStringList>

class QCustomPlot;

namespace rematlab::ui {

QCustomPlot* make_chart(const QString& title, const QString& x_label, const QString& y_label);
// Writes BASE.png and BASE.pdf; returns the paths written (empty entries are dropped).
QStringList save_chart(QCustomPlot* chart, const QString& base);

}  // namespace rematlab::ui
