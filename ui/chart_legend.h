// One legend for a tab's charts, outside them: every chart of the Live tab (and of Compare)
// draws a run in the same colour, so one list names them all and no chart gives its plot's room
// to a legend of its own. Entries flow in rows across the tab, at most kMaxRows of them high
// (it scrolls beyond); a name too long for the row is elided and whole in its tooltip. Charts
// keep their own legends for export only (chart_style.h).
#pragma once

#include <QColor>
#include <QListWidget>
#include <vector>

namespace rematlab::ui {

class ChartLegend : public QListWidget {
  Q_OBJECT

 public:
  enum class Mark { kLine, kDisc, kCircle };
  struct Entry {
    QString text;
    QColor colour;
    Qt::PenStyle style = Qt::SolidLine;
    Mark mark = Mark::kLine;
    QString tooltip;  // said under the text (which the tooltip always has whole)
  };
  static constexpr int kMaxRows = 3;

  explicit ChartLegend(QWidget* parent = nullptr);

  void set_entries(const std::vector<Entry>& entries);
  QStringList texts() const;
  // The rows the entries take at the legend's width, and the rows it shows without scrolling.
  int rows_needed() const;
  int rows_shown() const;

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void fit_height();
  int row_height() const;
};

}  // namespace rematlab::ui
