#include "advice_panel.h"

#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <algorithm>

#include "advise/advisor.h"
#include "common/current_exception.h"

namespace rematlab::ui {

void AdviceWorker::diagnose(qint64 request, const QString& database, qint64 run_id, bool replay,
                            const std::shared_ptr<std::atomic<bool>>& cancel) {
  // A slot must never let an exception escape: every failure becomes a signal.
  try {
    RunStore store(database.toStdString(), StoreAccess::kReadOnly, /*create=*/false);
    advise::AdviseOptions options;
    options.replay = replay;
    options.cancel = cancel.get();
    emit diagnosed(request, advise::diagnose_run(store, run_id, options));
  } catch (...) {
    emit failed(request, QString::fromStdString(describe_current_exception()));
  }
}

AdvicePanel::AdvicePanel(QWidget* parent)
    : QWidget(parent),
      status_(new QLabel("Select one run to see the advisor's findings.")),
      tree_(new QTreeWidget),
      notes_(new QLabel),
      replay_(new QPushButton("Diagnose with replays")),
      worker_(new AdviceWorker) {
  qRegisterMetaType<advise::Diagnosis>();
  status_->setWordWrap(true);
  notes_->setWordWrap(true);
  tree_->setColumnCount(2);
  tree_->setHeaderLabels({"Finding", "Evidence"});
  // Findings span the panel (a long one is elided; its tooltip has it whole); under each, short
  // labels beside values that take the rest of the width. Sized to their contents, long titles
  // pushed the evidence off a 1280×720 screen.
  tree_->header()->setStretchLastSection(true);
  tree_->header()->setSectionResizeMode(0, QHeaderView::Interactive);
  replay_->setToolTip(
      "Train the run's configuration again on this machine: names the first non-finite sublayer "
      "of a diverged run, checks recomputation at that step, and finds parameters without "
      "gradient");
  replay_->setEnabled(false);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(new QLabel("<b>Advisor</b>"));
  layout->addWidget(status_);
  layout->addWidget(tree_, 1);
  layout->addWidget(notes_);
  layout->addWidget(replay_);
  connect(replay_, &QPushButton::clicked, this, &AdvicePanel::diagnose_with_replays);

  worker_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(worker_, &AdviceWorker::diagnosed, this, &AdvicePanel::show_diagnosis);
  connect(worker_, &AdviceWorker::failed, this, [this](qint64 request, const QString& message) {
    if (request != pending_) return;
    pending_ = 0;
    replay_->setEnabled(run_id_ > 0);
    status_->setText("The advisor failed: " + message);
  });
  thread_.start();
}

AdvicePanel::~AdvicePanel() {
  *cancel_ = true;  // a replay in progress stops between steps
  thread_.quit();
  thread_.wait();
}

void AdvicePanel::set_database(const QString& path) {
  database_ = path;
  show_run(0);
}

void AdvicePanel::show_run(qint64 run_id) {
  run_id_ = database_.isEmpty() ? 0 : run_id;
  tree_->clear();
  notes_->clear();
  kinds_.clear();
  if (run_id_ == 0) {
    pending_ = 0;
    replay_->setEnabled(false);
    status_->setText("Select one run to see the advisor's findings.");
    return;
  }
  start(false);
}

void AdvicePanel::diagnose_with_replays() {
  if (run_id_ > 0) start(true);
}

void AdvicePanel::start(bool replay) {
  // A newer request supersedes the one in flight: it is told to stop, and its answer ignored.
  *cancel_ = true;
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  pending_ = next_request_++;
  replay_->setEnabled(false);
  status_->setText(replay ? QString("Replaying run #%1…").arg(run_id_)
                          : QString("Reading run #%1…").arg(run_id_));
  QMetaObject::invokeMethod(
      worker_,
      [worker = worker_, cancel = cancel_, request = pending_, database = database_, run = run_id_,
       replay] { worker->diagnose(request, database, run, replay, cancel); },
      Qt::QueuedConnection);
}

QStringList AdvicePanel::finding_kinds() const { return kinds_; }

QString AdvicePanel::status_text() const { return status_->text(); }

void AdvicePanel::show_diagnosis(qint64 request, const advise::Diagnosis& diagnosis) {
  if (request != pending_) return;  // superseded
  pending_ = 0;
  replay_->setEnabled(run_id_ > 0);
  tree_->clear();
  kinds_.clear();
  status_->setText(diagnosis.findings.empty()
                       ? QString("Run #%1: no findings.").arg(diagnosis.run_id)
                       : QString("Run #%1: %2 finding(s).")
                             .arg(diagnosis.run_id)
                             .arg(diagnosis.findings.size()));
  int label_width = tree_->fontMetrics().horizontalAdvance(tree_->headerItem()->text(0));
  for (const advise::Finding& finding : diagnosis.findings) {
    kinds_ << QString::fromStdString(advise::to_string(finding.kind));
    auto* item = new QTreeWidgetItem(tree_, {QString::fromStdString(finding.title)});
    item->setFirstColumnSpanned(true);
    item->setToolTip(0, item->text(0));
    const auto add_row = [&](const std::string& label, const std::string& value) {
      auto* row =
          new QTreeWidgetItem(item, {QString::fromStdString(label), QString::fromStdString(value)});
      row->setToolTip(1, row->text(1));
      label_width = std::max(label_width, tree_->fontMetrics().horizontalAdvance(row->text(0)));
    };
    for (const advise::Evidence& evidence : finding.evidence)
      add_row(evidence.label, evidence.value);
    add_row("next step", finding.next_step);
    item->setExpanded(true);
  }
  // The labels whole, unless they would take more than 60 % of the panel: the values need it.
  tree_->header()->resizeSection(0, std::min(label_width + tree_->indentation() + 16,
                                             std::max(80, tree_->viewport()->width() * 3 / 5)));
  QStringList notes;
  for (const std::string& note : diagnosis.notes) notes << "• " + QString::fromStdString(note);
  notes_->setText(notes.join("\n"));
  emit diagnosisShown(diagnosis.run_id);
}

}  // namespace rematlab::ui
