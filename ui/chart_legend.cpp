#include "chart_legend.h"

#include <QPainter>
#include <QSet>
#include <QTimer>
#include <algorithm>

namespace rematlab::ui {
namespace {

constexpr QSize kSwatch(22, 10);

// What the line or marker of a curve looks like, drawn small.
QIcon swatch(const ChartLegend::Entry& entry) {
  QPixmap pixmap(kSwatch * 2);  // drawn at twice the size: sharp on high-DPI screens
  pixmap.setDevicePixelRatio(2.0);
  pixmap.fill(Qt::transparent);
  QPainter painter(&pixmap);
  painter.setRenderHint(QPainter::Antialiasing);
  const QPointF middle(kSwatch.width() / 2.0, kSwatch.height() / 2.0);
  switch (entry.mark) {
    case ChartLegend::Mark::kLine:
      painter.setPen(QPen(entry.colour, 2.0, entry.style));
      painter.drawLine(QPointF(1, middle.y()), QPointF(kSwatch.width() - 1, middle.y()));
      break;
    case ChartLegend::Mark::kDisc:
      painter.setPen(Qt::NoPen);
      painter.setBrush(entry.colour);
      painter.drawEllipse(middle, 4.0, 4.0);
      break;
    case ChartLegend::Mark::kCircle:
      painter.setPen(QPen(entry.colour, 1.5));
      painter.drawEllipse(middle, 4.0, 4.0);
      break;
  }
  return QIcon(pixmap);
}

}  // namespace

ChartLegend::ChartLegend(QWidget* parent) : QListWidget(parent) {
  setViewMode(QListView::ListMode);
  setFlow(QListView::LeftToRight);
  setWrapping(true);
  setResizeMode(QListView::Adjust);
  setIconSize(kSwatch);
  setSpacing(1);
  setTextElideMode(Qt::ElideRight);
  setSelectionMode(QAbstractItemView::NoSelection);
  setFocusPolicy(Qt::NoFocus);  // nothing to do with the keyboard here
  setFrameShape(QFrame::NoFrame);
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
  viewport()->setAutoFillBackground(false);
  setStyleSheet("QListWidget { background: transparent; }");
  hide();  // until there is something to name
}

void ChartLegend::set_entries(const std::vector<Entry>& entries) {
  clear();
  for (const Entry& entry : entries) {
    auto* item = new QListWidgetItem(swatch(entry), entry.text, this);
    item->setToolTip(entry.tooltip.isEmpty() ? entry.text : entry.text + "\n" + entry.tooltip);
    item->setFlags(Qt::ItemIsEnabled);
  }
  setVisible(!entries.empty());
  fit_height();
}

QStringList ChartLegend::texts() const {
  QStringList all;
  for (int i = 0; i < count(); ++i) all << item(i)->text();
  return all;
}

int ChartLegend::row_height() const {
  const int item_height = count() > 0 ? visualItemRect(item(0)).height() : 0;
  return std::max({item_height, iconSize().height(), fontMetrics().height()}) + 2 * spacing();
}

int ChartLegend::rows_needed() const {
  QSet<int> tops;  // one per row the view laid the entries out in
  for (int i = 0; i < count(); ++i) tops.insert(visualItemRect(item(i)).top());
  return static_cast<int>(tops.size());
}

int ChartLegend::rows_shown() const { return std::max(0, height() / row_height()); }

// As tall as its rows, up to kMaxRows: a legend of two runs takes one row, not three.
void ChartLegend::fit_height() {
  doItemsLayout();
  const int rows = std::clamp(rows_needed(), 1, kMaxRows);
  const int height = rows * row_height();
  if (height != this->height() || minimumHeight() != height) setFixedHeight(height);
}

void ChartLegend::resizeEvent(QResizeEvent* event) {
  QListWidget::resizeEvent(event);
  // After the view has laid its items out at the new width.
  QTimer::singleShot(0, this, &ChartLegend::fit_height);
}

}  // namespace rematlab::ui
