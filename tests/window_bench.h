// The window on a fresh database, as the offscreen UI tests drive it (test_ui.cpp and the other
// test_*.cpp of the test_ui binary): the tiny model, short runs, one training thread; and what
// those tests do to it as a user would (show it at a screen's size, answer its dialogs).
#pragma once

#include <gtest/gtest.h>

#include <QAbstractButton>
#include <QApplication>
#include <QComboBox>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>
#include <memory>

#include "advice_panel.h"
#include "experiment_panel.h"
#include "main_window.h"
#include "runs_view.h"
#include "store/run_store.h"

namespace rematlab::ui::testing {

constexpr int kTimeoutMs = 120000;

// A window on a fresh database in its own directory.
struct Bench {
  QTemporaryDir dir;
  QString db = dir.filePath("runs.sqlite");
  MainWindow window{db};
  ExperimentPanel* panel = window.experiment_panel();

  Bench() {
    panel->preset_field()->setCurrentText("tiny");
    panel->policies_field()->setText("none");
    panel->steps_field()->setValue(6);
    panel->findChild<QSpinBox*>("threads")->setValue(1);
  }
  RunStore reader() const { return RunStore(db.toStdString(), StoreAccess::kReadOnly, false); }
  // Clicks Run and waits for the sweep to end; returns the last run's status.
  QString run_sweep() {
    QSignalSpy ended(&window, &MainWindow::sweepEnded);
    panel->run_button()->click();
    EXPECT_TRUE(window.is_running());
    if (!ended.wait(kTimeoutMs)) return "timeout";
    return ended.takeFirst().at(0).toString();
  }
};

// The window shown at a screen's size (1024×600, 1280×720 …), laid out as a user sees it.
inline void show_at(QWidget& window, int width, int height) {
  // Not maximized (as a window on a small screen starts): the size the test gives is the screen.
  window.setWindowState(Qt::WindowNoState);
  window.resize(width, height);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  QApplication::processEvents();
}

// Where `widget` lies in `window`'s coordinates.
inline QRect rect_in(const QWidget* widget, const QWidget* window) {
  return QRect(widget->mapTo(window, QPoint(0, 0)), widget->size());
}

// Answers the next message box that opens (within `wait_ms`) with the button whose text starts
// with `button_text`, as a user would click it; records its text in `seen` when given. Returns
// immediately: the answer comes from the event loop while the dialog runs.
inline void answer_next_dialog(const QString& button_text, QString* seen = nullptr,
                               int wait_ms = 20000) {
  auto* timer = new QTimer;
  auto waited = std::make_shared<int>(0);
  QObject::connect(timer, &QTimer::timeout, [timer, waited, button_text, seen, wait_ms] {
    *waited += 20;
    auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
    if (!box && *waited < wait_ms) return;
    timer->stop();
    timer->deleteLater();
    if (!box) return;
    if (seen) *seen = box->text();
    for (QAbstractButton* button : box->buttons()) {
      if (button->text().startsWith(button_text)) {
        button->click();
        return;
      }
    }
    ADD_FAILURE() << "no button " << button_text.toStdString()
                  << " in: " << box->text().toStdString();
    box->reject();
  });
  timer->start(20);
}

// The advisor's findings for `id`, selected in the Runs tab as a user would.
inline AdvicePanel* advise(Bench& bench, int64_t id) {
  AdvicePanel* advice = bench.window.runs_view()->advice_panel();
  QSignalSpy shown(advice, &AdvicePanel::diagnosisShown);
  bench.window.runs_view()->select_ids({id});
  EXPECT_TRUE(shown.wait(kTimeoutMs));
  return advice;
}

}  // namespace rematlab::ui::testing
