// The advisor beside the Runs table: the findings for the one selected run (core/advise), each
// with its evidence and next step. The diagnosis runs in a worker thread with its own read-only
// connection to the database: records alone when a run is selected, with replays (which train
// the run's configuration again) when asked.
#pragma once

#include <QStringList>
#include <QThread>
#include <QWidget>
#include <atomic>
#include <memory>

#include "advise/finding.h"

class QLabel;
class QPushButton;
class QTreeWidget;

Q_DECLARE_METATYPE(rematlab::advise::Diagnosis)

namespace rematlab::ui {

// Lives in the panel's thread; only values cross (the cancel flag is shared, and atomic).
class AdviceWorker : public QObject {
  Q_OBJECT

 public:
  // Runs on the worker's thread (the panel queues it there); answers through a signal.
  void diagnose(qint64 request, const QString& database, qint64 run_id, bool replay,
                const std::shared_ptr<std::atomic<bool>>& cancel);

 signals:
  void diagnosed(qint64 request, const rematlab::advise::Diagnosis& diagnosis);
  void failed(qint64 request, const QString& message);
};

class AdvicePanel : public QWidget {
  Q_OBJECT

 public:
  explicit AdvicePanel(QWidget* parent = nullptr);
  ~AdvicePanel() override;

  // The database runs are read from (empty: none open).
  void set_database(const QString& path);
  // Diagnoses `run_id` from its records; 0 clears the panel.
  void show_run(qint64 run_id);
  // Diagnoses the shown run again with replays.
  void diagnose_with_replays();

  qint64 run_id() const { return run_id_; }
  bool busy() const { return pending_ != 0; }
  // The kinds of the findings shown ("diverged", …), in order; what the tests read.
  QStringList finding_kinds() const;
  QString status_text() const;
  QTreeWidget* findings_tree() const { return tree_; }
  // The checks passed ("✓ …") and what could not be checked ("• …"), under the findings.
  QString notes_text() const;

 signals:
  void diagnosisShown(qint64 run_id);

 private:
  void start(bool replay);
  void show_diagnosis(qint64 request, const advise::Diagnosis& diagnosis);

  QString database_;
  qint64 run_id_ = 0;
  qint64 next_request_ = 1;
  qint64 pending_ = 0;  // the request whose answer is awaited; 0: none
  QStringList kinds_;
  bool replaying_ = false;           // the awaited answer is a replay's
  QStringList kinds_before_replay_;  // what was shown when it was asked for
  QLabel* status_;
  QTreeWidget* tree_;
  QLabel* notes_;
  QPushButton* replay_;
  std::shared_ptr<std::atomic<bool>> cancel_ = std::make_shared<std::atomic<bool>>(false);
  QThread thread_;
  AdviceWorker* worker_;
};

}  // namespace rematlab::ui
