#include "wheel_guard.h"

#include <QAbstractScrollArea>
#include <QAbstractSpinBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QWheelEvent>

namespace rematlab::ui {

WheelGuard::WheelGuard(QAbstractScrollArea* area) : QObject(area), area_(area) {}

void WheelGuard::install(QAbstractScrollArea* area, QWidget* form) {
  auto* guard = new WheelGuard(area);  // owned by the area
  QList<QWidget*> fields;
  for (auto* box : form->findChildren<QAbstractSpinBox*>()) fields << box;
  for (auto* box : form->findChildren<QComboBox*>()) fields << box;
  for (QWidget* field : fields) {
    // Wheel focus would make the first wheel turn over a field grab it; a click still focuses.
    field->setFocusPolicy(Qt::StrongFocus);
    field->installEventFilter(guard);
  }
}

bool WheelGuard::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() != QEvent::Wheel) return false;
  auto* field = qobject_cast<QWidget*>(watched);
  if (!field || field->hasFocus()) return false;
  // Sent on rather than ignored: a synthesised (non-spontaneous) wheel event is not propagated
  // to parents by Qt, and scrolling must not depend on where the event came from.
  QCoreApplication::sendEvent(area_->viewport(), event);
  return true;
}

}  // namespace rematlab::ui
