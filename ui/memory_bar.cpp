#include "memory_bar.h"

#include <QPainter>
#include <algorithm>

#include "units.h"

namespace rematlab::ui {

MemoryBar::MemoryBar(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
}

void MemoryBar::set_parts(std::vector<Part> parts, int64_t capacity_bytes, const QString& title) {
  parts_ = std::move(parts);
  capacity_ = capacity_bytes;
  title_ = title;
  QString tip = title_;
  for (const Part& part : parts_) tip += QString("\n%1: %2 GiB").arg(part.name, gib(part.bytes));
  setToolTip(tip);
  update();
}

int64_t MemoryBar::total_bytes() const {
  int64_t total = 0;
  for (const Part& part : parts_) total += part.bytes;
  return total;
}

QSize MemoryBar::minimumSizeHint() const {
  const int line = fontMetrics().height();
  return {120, 3 * line + 24};  // title, bar, one line of names (more lines when wider)
}

QSize MemoryBar::sizeHint() const {
  return {360, 4 * fontMetrics().height() + 24};  // room for two lines of names
}

void MemoryBar::paintEvent(QPaintEvent*) {
  QPainter painter(this);
  painter.setRenderHint(QPainter::Antialiasing, false);
  const int line = fontMetrics().height();
  const QRect area = rect().adjusted(4, 2, -4, -2);
  if (parts_.empty()) {
    painter.setPen(palette().color(QPalette::PlaceholderText));
    painter.drawText(area, Qt::AlignCenter, "Memory per GPU of the chosen layout");
    return;
  }
  painter.setPen(palette().color(QPalette::WindowText));
  painter.drawText(QRect(area.left(), area.top(), area.width(), line), Qt::AlignLeft,
                   fontMetrics().elidedText(title_, Qt::ElideRight, area.width()));
  // The bar spans the larger of the capacity and what the layout needs.
  const double scale = static_cast<double>(std::max(capacity_, total_bytes()));
  const QRect bar(area.left(), area.top() + line + 4, area.width(), line + 4);
  double x = bar.left();
  for (const Part& part : parts_) {
    const double width = scale > 0 ? bar.width() * static_cast<double>(part.bytes) / scale : 0;
    painter.fillRect(QRectF(x, bar.top(), width, bar.height()), part.color);
    x += width;
  }
  painter.setPen(QPen(palette().color(QPalette::WindowText), 1));
  painter.drawRect(bar);
  if (scale > 0) {
    const int mark = bar.left() + static_cast<int>(bar.width() * capacity_ / scale);
    painter.setPen(QPen(Qt::black, 2, Qt::DashLine));
    painter.drawLine(mark, bar.top() - 3, mark, bar.bottom() + 3);
  }
  // The names, as many a line as fit.
  int left = area.left();
  int top = bar.bottom() + 6;
  const int swatch = line - 4;
  for (const Part& part : parts_) {
    const QString text = QString("%1 %2").arg(part.name, gib(part.bytes));
    const int width = swatch + 4 + fontMetrics().horizontalAdvance(text) + 12;
    if (left + width > area.right() && left > area.left()) {
      left = area.left();
      top += line;
    }
    painter.fillRect(QRect(left, top + 2, swatch, swatch), part.color);
    painter.setPen(palette().color(QPalette::WindowText));
    painter.drawText(QRect(left + swatch + 4, top, width, line), Qt::AlignLeft, text);
    left += width;
  }
}

}  // namespace rematlab::ui
