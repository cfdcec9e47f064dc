// The window on a fresh database, as the offscreen UI tests drive it (test_ui.cpp,
// test_plan_view.cpp): the tiny model, short runs, one training thread.
#pragma once

#include <gtest/gtest.h>

#include <QComboBox>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>

#include "experiment_panel.h"
#include "main_window.h"
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

}  // namespace rematlab::ui::testing
