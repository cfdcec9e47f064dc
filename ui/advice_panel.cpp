#include "advice_panel.h"

#include <QEvent>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QStyledItemDelegate>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <functional>

#include "advice_words.h"
#include "advise/advisor.h"
#include "common/current_exception.h"

namespace rematlab::ui {
namespace {

// Rows as tall as their text wrapped at their column's width (a tree view asks its delegate for
// a row's height without one, so a long next step would be cut, not wrapped).
class WrappingDelegate : public QStyledItemDelegate {
 public:
  explicit WrappingDelegate(QTreeWidget* tree) : QStyledItemDelegate(tree), tree_(tree) {
    // New widths, new heights: the tree lays its rows out again.
    const auto relayout = [this] {
      if (tree_->topLevelItemCount() > 0) emit sizeHintChanged(tree_->model()->index(0, 0));
    };
    connect(tree_->header(), &QHeaderView::sectionResized, this, relayout);
    tree_->viewport()->installEventFilter(this);
    relayout_ = relayout;
  }

  QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override {
    QSize size = QStyledItemDelegate::sizeHint(option, index);
    const bool title = !index.parent().isValid();  // spans the tree's width
    int width = title ? tree_->viewport()->width() : tree_->header()->sectionSize(index.column());
    if (index.column() == 0) width -= tree_->indentation();
    const QRect text = option.fontMetrics.boundingRect(
        QRect(0, 0, std::max(40, width - 8), 1 << 20), Qt::TextWordWrap, index.data().toString());
    size.setHeight(std::max(size.height(), text.height() + 6));
    return size;
  }

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (event->type() == QEvent::Resize) relayout_();
    return QStyledItemDelegate::eventFilter(watched, event);
  }

 private:
  QTreeWidget* tree_;
  std::function<void()> relayout_;
};

}  // namespace

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
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  notes_->setWordWrap(true);
  notes_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  tree_->setColumnCount(2);
  tree_->setHeaderLabels({"Finding", "Evidence"});
  // Findings span the panel; under each, short labels beside values that take the rest of the
  // width. Every text wraps in its column, so none is cut off (each also has its tooltip).
  tree_->header()->setStretchLastSection(true);
  tree_->header()->setSectionResizeMode(0, QHeaderView::Interactive);
  tree_->setWordWrap(true);
  tree_->setUniformRowHeights(false);
  tree_->setTextElideMode(Qt::ElideNone);
  tree_->setItemDelegate(new WrappingDelegate(tree_));  // owned by the tree
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
  replaying_ = false;
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
  replaying_ = replay;
  kinds_before_replay_ = kinds_;
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

QString AdvicePanel::notes_text() const { return notes_->text(); }

namespace {

QString count_findings(std::size_t count) {
  return count == 0   ? QString("no findings")
         : count == 1 ? QString("1 finding")
                      : QString("%1 findings").arg(count);
}

// "missing_gradients" → "missing gradients".
QString kind_words(const QString& kind) { return QString(kind).replace('_', ' '); }

}  // namespace

void AdvicePanel::show_diagnosis(qint64 request, const advise::Diagnosis& diagnosis) {
  if (request != pending_) return;  // superseded
  pending_ = 0;
  replay_->setEnabled(run_id_ > 0);
  tree_->clear();
  kinds_.clear();
  int label_width = tree_->fontMetrics().horizontalAdvance(tree_->headerItem()->text(0));
  for (const advise::Finding& finding : diagnosis.findings) {
    kinds_ << QString::fromStdString(advise::to_string(finding.kind));
    auto* item = new QTreeWidgetItem(tree_, {QString::fromStdString(finding.title)});
    item->setFirstColumnSpanned(true);
    item->setToolTip(0, item->text(0));
    const auto add_row = [&](const QString& label, const QString& value) {
      auto* row = new QTreeWidgetItem(item, {label, value});
      row->setToolTip(0, label);
      row->setToolTip(1, value);
      label_width = std::max(label_width, tree_->fontMetrics().horizontalAdvance(label));
    };
    for (const advise::Evidence& evidence : finding.evidence) {
      add_row(QString::fromStdString(evidence.label), QString::fromStdString(evidence.value));
    }
    // The window's words for what to do: its fields and tabs, not command-line flags.
    add_row("next step", in_form_words(finding.next_step));
    item->setExpanded(true);
  }
  // The labels whole, unless they would take more than 40 % of the panel: the values need it
  // (a longer label wraps).
  tree_->header()->resizeSection(0, std::min(label_width + tree_->indentation() + 16,
                                             std::max(80, tree_->viewport()->width() * 2 / 5)));
  QString status = QString("Run #%1: %2.").arg(diagnosis.run_id).arg(count_findings(kinds_.size()));
  if (replaying_) {
    // What the replay added, also when it was nothing: the panel must not look unchanged.
    QStringList added;
    for (const QString& kind : kinds_) {
      if (!kinds_before_replay_.contains(kind)) added << kind_words(kind);
    }
    status =
        QString("Run #%1 replayed: %2; %3.")
            .arg(diagnosis.run_id)
            .arg(added.isEmpty()
                     ? QString("nothing new")
                     : QString("%1 new (%2)").arg(count_findings(added.size()), added.join(", ")))
            .arg(count_findings(kinds_.size()));
  }
  replaying_ = false;
  status_->setText(status);
  QStringList notes;
  for (const Wording& line : diagnosis.checked) {
    notes << "✓ " + in_form_words(line);
  }
  for (const Wording& note : diagnosis.notes) {
    notes << "• " + in_form_words(note);
  }
  notes_->setText(notes.join("\n"));
  emit diagnosisShown(diagnosis.run_id);
}

}  // namespace rematlab::ui
