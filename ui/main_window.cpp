#include "main_window.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QSplitter>
#include <QStatusBar>

#include "common/byte_size.h"
#include "live_charts.h"
#include "run_panel.h"
#include "training_worker.h"

namespace rematlab::ui {

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent),
      panel_(new RunPanel),
      charts_(new LiveCharts),
      progress_(new QProgressBar),
      status_(new QLabel("Ready")),
      worker_(new TrainingWorker) {
  qRegisterMetaType<rematlab::StepMetrics>();
  qRegisterMetaType<rematlab::RunConfig>();
  setWindowTitle("RematLab");
  auto* splitter = new QSplitter;
  splitter->addWidget(panel_);
  splitter->addWidget(charts_);
  splitter->setStretchFactor(1, 1);
  setCentralWidget(splitter);
  statusBar()->addWidget(status_, 1);
  statusBar()->addPermanentWidget(progress_);
  progress_->setMaximumWidth(240);
  resize(1200, 800);

  worker_->moveToThread(&worker_thread_);
  connect(&worker_thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(this, &MainWindow::startRun, worker_, &TrainingWorker::run);
  connect(worker_, &TrainingWorker::stepFinished, this, &MainWindow::on_step);
  connect(worker_, &TrainingWorker::runFinished, this, &MainWindow::on_run_finished);
  connect(worker_, &TrainingWorker::failed, this, &MainWindow::on_failed);
  connect(this, &MainWindow::startCheck, worker_, &TrainingWorker::check);
  connect(worker_, &TrainingWorker::checkFinished, this, &MainWindow::on_check_finished);
  connect(panel_, &RunPanel::runRequested, this, &MainWindow::on_run_requested);
  connect(panel_, &RunPanel::checkRequested, this, &MainWindow::on_check_requested);
  connect(panel_, &RunPanel::stopRequested, this, [this] { worker_->request_cancel(); });
  worker_thread_.start();
}

MainWindow::~MainWindow() {
  worker_->request_cancel();  // stops within one micro-batch
  worker_thread_.quit();
  worker_thread_.wait();
}

void MainWindow::set_busy(bool busy) {
  running_ = busy;
  panel_->set_running(busy);
}

void MainWindow::on_run_requested(const RunConfig& config) {
  set_busy(true);
  progress_->setRange(0, static_cast<int>(config.steps));
  progress_->setValue(0);
  const QString label = QString("%1 b%2").arg(QString::fromStdString(config.checkpoint)).arg(config.batch);
  charts_->begin_run(label, static_cast<double>(config.budget_bytes));
  status_->setText("Starting " + label + " …");
  emit startRun(config);
}

void MainWindow::on_step(const StepMetrics& step) {
  charts_->add_step(step);
  progress_->setValue(static_cast<int>(step.step + 1));
  status_->setText(QString("step %1 of %2   loss %3   %4 tokens/s   peak %5")
                       .arg(step.step + 1)
                       .arg(step.total_steps)
                       .arg(step.loss, 0, 'f', 4)
                       .arg(step.tokens_per_s, 0, 'f', 0)
                       .arg(QString::fromStdString(format_bytes(step.peak_bytes))));
}

void MainWindow::on_run_finished(const QString& status, const QString& summary) {
  set_busy(false);
  status_->setText(status + ": " + summary);
  emit runEnded(status);
}

void MainWindow::on_failed(const QString& message) {
  set_busy(false);
  status_->setText("Failed: " + message);
  emit runEnded("failed");
}

void MainWindow::on_check_requested(const RunConfig& config) {
  set_busy(true);
  status_->setText("Checking gradients of " + QString::fromStdString(config.checkpoint) + " …");
  emit startCheck(config);
}

void MainWindow::on_check_finished(bool identical, const QString& verdict) {
  set_busy(false);
  status_->setText(verdict);
  emit checkEnded(identical, verdict);
}

}  // namespace rematlab::ui
