// The mouse wheel scrolls a form, not the field under the pointer: a spin box or combo box that
// does not have focus hands wheel events to the scroll area around it, so scrolling the panel
// never changes a value by accident. A field the user clicked into (focus) still takes the wheel.
#pragma once

#include <QObject>

class QAbstractScrollArea;
class QWidget;

namespace rematlab::ui {

class WheelGuard : public QObject {
  Q_OBJECT

 public:
  // Guards every spin box and combo box inside `area`'s widget; the guard is a child of `area`.
  static void install(QAbstractScrollArea* area, QWidget* form);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  explicit WheelGuard(QAbstractScrollArea* area);
  QAbstractScrollArea* area_;
};

}  // namespace rematlab::ui
