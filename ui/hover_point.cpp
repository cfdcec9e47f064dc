#include "hover_point.h"

#include <qcustomplot.h>

#include <cmath>

namespace rematlab::ui {

QString nearest_point_text(const QCustomPlot* chart, const std::vector<const HoverPoint*>& points,
                           QPointF pixel, double radius) {
  const HoverPoint* nearest = nullptr;
  double best = radius;
  for (const HoverPoint* point : points) {
    const double dx = chart->xAxis->coordToPixel(point->x) - pixel.x();
    const double dy = chart->yAxis->coordToPixel(point->y) - pixel.y();
    const double distance = std::hypot(dx, dy);
    if (distance < best) {
      best = distance;
      nearest = point;
    }
  }
  return nearest ? nearest->text : QString();
}

}  // namespace rematlab::ui
