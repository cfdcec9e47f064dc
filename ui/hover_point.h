// A point a chart names when the pointer comes near it: the Plan and Scale tabs' charts.
#pragma once

#include <QPointF>
#include <QString>
#include <vector>

class QCustomPlot;

namespace rematlab::ui {

struct HoverPoint {
  double x = 0.0;  // in the chart's axis coordinates
  double y = 0.0;
  QString text;
};

// The text of the point nearest `pixel` within `radius` pixels, the first listed on a tie (list
// what is drawn on top first); empty when none is that near.
QString nearest_point_text(const QCustomPlot* chart, const std::vector<const HoverPoint*>& points,
                           QPointF pixel, double radius);

}  // namespace rematlab::ui
