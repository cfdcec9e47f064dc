// MainWindow's menus and keyboard: File (databases, CSV and chart exports), Run, View (the tabs,
// with the usual shortcuts from anywhere in the window), Help; and quitting during a sweep.
#include <QAbstractButton>
#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenuBar>
#include <QMessageBox>
#include <QTabBar>
#include <QTabWidget>

#include "chart_export.h"
#include "compare_view.h"
#include "elided_label.h"
#include "experiment_panel.h"
#include "live_charts.h"
#include "main_window.h"
#include "plan_view.h"
#include "runs_view.h"
#include "runtime/runtime_info.h"
#include "store/run_store.h"
#include "sweep/default_study.h"
#include "sweep_worker.h"
#include "workbench_settings.h"

namespace rematlab::ui {
namespace {

// The charts File → Export charts writes when all have data: Live 4, Compare 5, Plan 1.
constexpr int kAllCharts = 10;

}  // namespace

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("&New database…", this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, "New runs database",
                                                      QDir(dialog_folder()).filePath("runs.sqlite"),
                                                      "RematLab database (*.sqlite)");
    if (!path.isEmpty()) new_database(path);
  });
  file->addAction("&Open database…", QKeySequence::Open, this, [this] {
    // Starts where the open database is (the default one lives in a hidden folder).
    const QString path = QFileDialog::getOpenFileName(
        this, "Open runs database", dialog_folder(), "RematLab database (*.sqlite);;All files (*)");
    if (!path.isEmpty()) open_database(path);
  });
  file->addSeparator();
  file->addAction("Export runs as &CSV (selected, or all shown)…", this,
                  [this] { runs_->ask_and_export(false); });
  file->addAction("Export &steps as CSV (selected, or all shown)…", this,
                  [this] { runs_->ask_and_export(true); });
  file->addAction("Export charts (PNG and PDF)…", this, &MainWindow::export_charts);
  file->addSeparator();
  file->addAction("&Quit", QKeySequence::Quit, this, &QWidget::close);

  QMenu* run = menuBar()->addMenu("&Run");
  start_action_ = run->addAction("&Start", QKeySequence(Qt::CTRL | Qt::Key_R), panel_,
                                 &ExperimentPanel::request_run);
  stop_action_ = run->addAction("S&top", QKeySequence(Qt::Key_Escape), this, &MainWindow::stop);
  run->addAction("Load the &default study", this,
                 [this] { panel_->load_spec(default_study_spec()); });
  check_action_ = run->addAction("&Check gradients", this, [this] {
    if (!panel_->can_check()) return;
    if (auto config = panel_->check_config()) on_check_requested(*config);
  });
  run->setToolTipsVisible(true);  // a disabled action says why

  // The tabs from anywhere in the window, as browsers and editors switch them: Ctrl+Tab and
  // Ctrl+PgDn onwards, Ctrl+Shift+Tab and Ctrl+PgUp back, Ctrl+1 … Ctrl+4 straight to one.
  QMenu* view = menuBar()->addMenu("&View");
  QAction* next = view->addAction("&Next tab", this, [this] {
    tabs_->setCurrentIndex((tabs_->currentIndex() + 1) % tabs_->count());
  });
  next->setShortcuts(
      {QKeySequence(Qt::CTRL | Qt::Key_Tab), QKeySequence(Qt::CTRL | Qt::Key_PageDown)});
  QAction* previous = view->addAction("&Previous tab", this, [this] {
    tabs_->setCurrentIndex((tabs_->currentIndex() + tabs_->count() - 1) % tabs_->count());
  });
  previous->setShortcuts({QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_Tab),
                          QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_Backtab),
                          QKeySequence(Qt::CTRL | Qt::Key_PageUp)});
  view->addSeparator();
  for (int index = 0; index < tabs_->count(); ++index) {
    QAction* tab = view->addAction(tabs_->tabText(index), this,
                                   [this, index] { tabs_->setCurrentIndex(index); });
    tab->setShortcut(QKeySequence(Qt::CTRL | (Qt::Key_1 + index)));
  }
  // A click on a tab takes the focus there, so the next arrow key turns the tabs, not a field of
  // the form the user left.
  tabs_->tabBar()->setFocusPolicy(Qt::StrongFocus);

  QMenu* help = menuBar()->addMenu("&Help");
  help->addAction("&About RematLab", this, &MainWindow::show_about);
}

void MainWindow::export_charts() {
  const QString directory = QFileDialog::getExistingDirectory(this, "Export charts to");
  if (!directory.isEmpty()) export_charts_to(directory);
}

void MainWindow::export_charts_to(const QString& directory) {
  const QStringList files = charts_->image_files(directory, "live") +
                            compare_->image_files(directory, "compare") +
                            plan_->image_files(directory, "plan");
  if (!files.isEmpty() && !may_replace(this, files)) {
    status_->setText("Nothing exported: the files already in " +
                     QDir::toNativeSeparators(directory) + " were kept");
    return;
  }
  const QStringList written = charts_->export_images(directory, "live") +
                              compare_->export_images(directory, "compare") +
                              plan_->export_images(directory, "plan");
  charts_exported(directory, written, kAllCharts);
}

void MainWindow::charts_exported(const QString& directory, const QStringList& written,
                                 int charts_asked) {
  if (written.isEmpty()) {
    status_->setText(charts_asked == 1 ? "Nothing exported: the chart is empty"
                                       : "Nothing exported: every chart is empty");
    return;
  }
  QStringList names;
  for (const QString& file : written) names << QFileInfo(file).fileName();
  const auto charts = static_cast<int>((written.size() + 1) / 2);  // a PNG and a PDF each
  QString text = QString("Wrote %1 %2 (PNG and PDF) to %3")
                     .arg(charts)
                     .arg(charts == 1 ? "chart" : "charts")
                     .arg(QDir::toNativeSeparators(directory));
  const int left_out = charts_asked - charts;
  if (left_out > 0) {
    text += QString(", %1 empty %2 left out").arg(left_out).arg(left_out == 1 ? "chart" : "charts");
  }
  status_->setText(text + ": " + names.join(", "));
}

void MainWindow::show_about() {
  const RuntimeInfo runtime = probe_runtime(/*measure_matmul=*/false);
  const QString device =
      runtime.cuda_available
          ? QString("%1 CUDA device(s)").arg(runtime.cuda_devices)
          : QString("CPU (%1)").arg(QString::fromStdString(runtime.cpu_capability));
  QMessageBox::about(this, "About RematLab",
                     QString("<b>RematLab %6</b> — activation checkpointing, measured.<br><br>"
                             "Qt %1<br>LibTorch %2 (BLAS: %3)<br>SQLite %4<br>Device: %5<br><br>"
                             "Licence: GPL-3.0-or-later")
                         .arg(qVersion())
                         .arg(QString::fromStdString(runtime.torch_version))
                         .arg(QString::fromStdString(runtime.blas_build))
                         .arg(QString::fromStdString(sqlite_version()))
                         .arg(device)
                         .arg(QApplication::applicationVersion()));
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (running_) {
    // Training stops as the question opens, not after the answer: what the dialog says is what
    // is recorded, and nothing trains on behind it.
    worker_->request_cancel();
    stopping_ = true;
    status_->setText(stopping_text());
    const QString ends_at =
        panel_->pipeline_stages() > 1 ? "the end of its step" : "its next micro-batch";
    QMessageBox box(QMessageBox::Question, "Quit RematLab",
                    profiling_
                        ? "The profile has been stopped; nothing of it is kept. Quit RematLab?"
                        : "The sweep has been stopped: the run in progress ends at " + ends_at +
                              " and is recorded as cancelled, and no other run starts. "
                              "Quit RematLab?",
                    QMessageBox::Yes | QMessageBox::No, this);
    box.button(QMessageBox::Yes)->setText("Quit");
    box.button(QMessageBox::No)->setText("Stay (stopped)");
    if (box.exec() != QMessageBox::Yes) {
      event->ignore();
      return;
    }
  }
  WorkbenchSettings().set_geometry(saveGeometry());
  remember_form();
  event->accept();
}

}  // namespace rematlab::ui
