#include "plan_strip.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

namespace rematlab::ui {
namespace {

constexpr int kEndWidth = 34;  // the embedding's and the head's cells
constexpr int kCellHeight = 26;
constexpr int kBracketHeight = 8;
constexpr int kMargin = 4;

const QColor kRecomputed(230, 140, 40);
const QColor kKept(120, 160, 210);
const QColor kOutside(200, 200, 200);

}  // namespace

PlanStrip::PlanStrip(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
  setToolTip("Which sublayers the plan recomputes");
}

QSize PlanStrip::sizeHint() const { return {600, minimumSizeHint().height()}; }

QSize PlanStrip::minimumSizeHint() const {
  return {2 * kEndWidth + 120, kCellHeight + kBracketHeight + 2 * kMargin};
}

void PlanStrip::set_plan(const CheckpointPlan& plan, int64_t stages) {
  plan_ = plan;
  has_plan_ = true;
  recomputed_.assign(static_cast<std::size_t>(stages), false);
  for (const Segment& segment : plan.segments) {
    for (int64_t i = segment.begin; i < segment.end && i < stages; ++i) {
      recomputed_[static_cast<std::size_t>(i)] = segment.recompute;
    }
  }
  update();
}

void PlanStrip::clear() {
  has_plan_ = false;
  plan_ = {};
  std::fill(recomputed_.begin(), recomputed_.end(), false);
  update();
}

void PlanStrip::reset() {
  has_plan_ = false;
  plan_ = {};
  recomputed_.clear();
  update();
}

QRectF PlanStrip::cell(int64_t stage) const {
  const double room = width() - 2.0 * kMargin - 2.0 * kEndWidth;
  const double each = room / std::max<std::size_t>(1, recomputed_.size());
  return {kMargin + kEndWidth + each * static_cast<double>(stage), kMargin + kBracketHeight, each,
          kCellHeight};
}

int64_t PlanStrip::stage_at(QPoint position) const {
  for (std::size_t i = 0; i < recomputed_.size(); ++i) {
    if (cell(static_cast<int64_t>(i)).contains(position)) return static_cast<int64_t>(i);
  }
  return -1;
}

QString PlanStrip::describe_stage(int64_t stage) const {
  const QString name = QString::fromStdString(sublayer_name(stage));
  const QString kind = stage % 2 == 0 ? "attention" : "MLP";
  const QString which = QString("%1 (block %2's %3)").arg(name).arg(stage / 2).arg(kind);
  if (!has_plan_) return which + ": no plan fits this budget";
  for (const Segment& segment : plan_.segments) {
    if (stage < segment.begin || stage >= segment.end) continue;
    if (!segment.recompute) return which + ": kept, what it saves stays until its backward";
    const QString span =
        segment.end - segment.begin == 1
            ? QString::fromStdString(sublayer_name(segment.begin))
            : QString("%1–%2").arg(QString::fromStdString(sublayer_name(segment.begin)),
                                   QString::fromStdString(sublayer_name(segment.end - 1)));
    return which +
           QString(": recomputed in backward (segment %1; only its input is kept)").arg(span);
  }
  return which;
}

bool PlanStrip::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    const auto* help = static_cast<QHelpEvent*>(event);
    const int64_t stage = stage_at(help->pos());
    QToolTip::showText(help->globalPos(), stage >= 0 ? describe_stage(stage) : toolTip(), this);
    return true;
  }
  return QWidget::event(event);
}

void PlanStrip::paintEvent(QPaintEvent*) {
  QPainter painter(this);
  painter.setRenderHint(QPainter::Antialiasing);
  QFont small = font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() - 2));
  painter.setFont(small);
  const QRectF embedding(kMargin, kMargin + kBracketHeight, kEndWidth - 2, kCellHeight);
  const QRectF head(width() - kMargin - kEndWidth + 2, kMargin + kBracketHeight, kEndWidth - 2,
                    kCellHeight);
  for (const auto& [rect, name] : {std::pair{embedding, "emb"}, std::pair{head, "head"}}) {
    painter.fillRect(rect, kOutside);
    painter.drawText(rect, Qt::AlignCenter, name);
  }
  const QFontMetrics metrics(small);
  for (std::size_t i = 0; i < recomputed_.size(); ++i) {
    const QRectF rect = cell(static_cast<int64_t>(i)).adjusted(0.5, 0, -0.5, 0);
    const QColor fill = !has_plan_ ? kOutside : recomputed_[i] ? kRecomputed : kKept;
    painter.fillRect(rect, fill);
    const QString name = QString::fromStdString(sublayer_name(static_cast<int64_t>(i)));
    if (metrics.horizontalAdvance(name) + 2 <= rect.width()) {
      painter.drawText(rect, Qt::AlignCenter, name);
    }
  }
  // A bracket over each recomputed segment: where recomputation starts again from a kept input.
  painter.setPen(QPen(kRecomputed.darker(150), 1.5));
  for (const Segment& segment : plan_.segments) {
    if (!has_plan_ || !segment.recompute) continue;
    const double left = cell(segment.begin).left() + 1;
    const double right = cell(segment.end - 1).right() - 1;
    const double top = kMargin + 1;
    const double bottom = kMargin + kBracketHeight - 1;
    painter.drawPolyline(QPolygonF{QPointF(left, bottom), QPointF(left, top), QPointF(right, top),
                                   QPointF(right, bottom)});
  }
}

}  // namespace rematlab::ui
