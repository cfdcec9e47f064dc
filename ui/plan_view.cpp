#include "plan_view.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSlider>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "advice_words.h"
#include "chart_export.h"
#include "chart_style.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "common/process_identity.h"
#include "plan/chain_costs_json.h"
#include "plan/frontier.h"
#include "plan/profile_key.h"
#include "plan_strip.h"
#include "store/run_store.h"
#include "units.h"

namespace rematlab::ui {
namespace {

constexpr int kSliderSteps = 1000;
const char* const kProfileHelp =
    "Measure each sublayer of the form's model, batch, precision and threads on this device "
    "(seconds to minutes; kept in the database and reused)";
constexpr int kFrontierBudgets = 60;  // where the predicted frontier is sampled

// A budget as the field shows it and `plan:` reads it back: MiB with one decimal (GiB with two
// from 10 GiB), rounded up, so that the slider's smallest end stays a budget some plan fits. The
// plan is always made from the text, so what is shown is what is planned and run.
QString budget_text(int64_t bytes) {
  const auto value = static_cast<double>(bytes);
  if (value >= 10 * kGiB)
    return QString::number(std::ceil(value / kGiB * 100) / 100, 'f', 2) + "GiB";
  if (value >= kMiB) return QString::number(std::ceil(value / kMiB * 10) / 10, 'f', 1) + "MiB";
  return QString::number(std::max<int64_t>(1, (bytes + 1023) / 1024)) + "KiB";
}

QString describe_configuration(const RunConfig& config, const std::string& host) {
  QString text =
      QString::fromStdString(describe_model(config)) + QString(" · batch %1").arg(config.batch);
  if (config.accum > 1) text += QString(" × %1").arg(config.accum);
  text += " · " + QString::fromStdString(to_string(config.precision));
  text += QString(" · %1 thread%2").arg(config.threads).arg(config.threads == 1 ? "" : "s");
  text += " · " + QString::fromStdString(config.device);
  if (host != current_process().host) text += " · on " + QString::fromStdString(host);
  return text;
}

}  // namespace

PlanView::PlanView(QWidget* parent)
    : QWidget(parent),
      configuration_(new QComboBox),
      profile_(new QPushButton("Profile the form's configuration")),
      slider_(new QSlider(Qt::Horizontal)),
      budget_(new QLineEdit),
      range_label_(new QLabel),
      chart_(make_chart("Plans under a memory budget (select or profile a configuration)",
                        "activation peak above the model states (MiB)", "tokens/s")),
      strip_(new PlanStrip),
      plan_label_(new QLabel),
      run_(new QPushButton("Run this plan")),
      export_(new QPushButton("Export chart…")) {
  set_up_fields();
  set_up_chart();
  lay_out();
  connect_signals();
  show_profile();
}

void PlanView::set_up_fields() {
  configuration_->setObjectName("plan-configuration");
  configuration_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  configuration_->setMinimumContentsLength(18);  // each item's tooltip has it whole
  configuration_->setToolTip("Configurations whose sublayers were measured (kept in the database)");
  profile_->setToolTip(kProfileHelp);
  slider_->setRange(0, kSliderSteps);
  slider_->setToolTip("From the smallest budget any plan fits to the peak without checkpointing");
  budget_->setObjectName("plan-budget");
  budget_->setMaximumWidth(120);
  budget_->setToolTip("Activation memory the plan must fit, above the model states (e.g. 200MiB)");
  range_label_->setObjectName("plan-range");
  range_label_->setWordWrap(true);  // two lines on a narrow screen rather than a wider window
  // It can quote the database (an error, a kept key's setting names): shown as the text it is.
  range_label_->setTextFormat(Qt::PlainText);
  plan_label_->setObjectName("plan-text");
  plan_label_->setWordWrap(true);
  // Room for three lines whatever the plan says, so the chart above never jumps as it changes.
  plan_label_->setMinimumHeight(3 * plan_label_->fontMetrics().lineSpacing());
  plan_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  run_->setToolTip(
      "Add plan:BUDGET to the form's policies (or make the form train this configuration): "
      "the run plans again when it starts, from this profile when it is this host's");
}

void PlanView::set_up_chart() {
  frontier_ = chart_->addGraph();
  frontier_->setName("plans (predicted)");
  frontier_->setPen(QPen(QColor(40, 90, 180), 2));
  frontier_->setLineStyle(QCPGraph::lsStepLeft);
  uniform_ = chart_->addGraph();
  uniform_->setName("uniform policies (predicted)");
  uniform_->setLineStyle(QCPGraph::lsNone);
  uniform_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, QColor(90, 90, 90), 7));
  measured_plans_ = chart_->addGraph();
  measured_plans_->setName("plans and segment lists (measured)");
  measured_plans_->setLineStyle(QCPGraph::lsNone);
  measured_plans_->setScatterStyle(
      QCPScatterStyle(QCPScatterStyle::ssDisc, QColor(30, 150, 60), QColor(30, 150, 60), 7));
  measured_others_ = chart_->addGraph();
  measured_others_->setName("other policies (measured)");
  measured_others_->setLineStyle(QCPGraph::lsNone);
  measured_others_->setScatterStyle(
      QCPScatterStyle(QCPScatterStyle::ssTriangle, QPen(QColor(200, 50, 50), 1.5), Qt::NoBrush, 8));
  chosen_ = chart_->addGraph();
  chosen_->setName("the plan at the budget (predicted)");
  // The budget is a straight line item, which a legend cannot list: an empty graph with its pen
  // names it there.
  budget_key_ = chart_->addGraph();
  budget_key_->setName("the budget (dashed line)");
  budget_key_->setPen(QPen(QColor(230, 140, 40), 1, Qt::DashLine));
  chosen_->setLineStyle(QCPGraph::lsNone);
  chosen_->setScatterStyle(
      QCPScatterStyle(QCPScatterStyle::ssStar, QPen(QColor(230, 140, 40), 2), Qt::NoBrush, 14));
  chart_->setMouseTracking(true);
}

void PlanView::lay_out() {
  auto* top = new QHBoxLayout;
  top->addWidget(new QLabel("Configuration"));
  top->addWidget(configuration_, 1);
  top->addWidget(profile_);
  auto* budget_row = new QHBoxLayout;
  budget_row->addWidget(new QLabel("Budget"));
  budget_row->addWidget(slider_, 1);
  budget_row->addWidget(budget_);
  auto* bottom = new QHBoxLayout;
  bottom->addWidget(plan_label_, 1);
  bottom->addWidget(run_);
  bottom->addWidget(export_);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(top);
  layout->addLayout(budget_row);
  layout->addWidget(range_label_);
  layout->addWidget(chart_, 1);
  layout->addWidget(strip_);
  layout->addLayout(bottom);
}

void PlanView::connect_signals() {
  connect(chart_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) {
    const QString text = describe_point_at(event->position());
    if (text.isEmpty()) {
      QToolTip::hideText();
    } else {
      QToolTip::showText(event->globalPosition().toPoint(), text, chart_);
    }
  });
  connect(configuration_, &QComboBox::currentIndexChanged, this, &PlanView::show_profile);
  connect(profile_, &QPushButton::clicked, this, &PlanView::profileRequested);
  connect(slider_, &QSlider::valueChanged, this, &PlanView::on_slider_moved);
  connect(budget_, &QLineEdit::textChanged, this, &PlanView::on_budget_edited);
  connect(run_, &QPushButton::clicked, this, &PlanView::request_run);
  connect(export_, &QPushButton::clicked, this, [this] {
    const QString directory = QFileDialog::getExistingDirectory(this, "Export the chart to");
    if (!directory.isEmpty()) export_chart_to(directory);
  });
}

PlanView::Profile PlanView::profile_of(const std::string& key,
                                       const plan::ProfiledConfiguration& parts, ChainCosts costs,
                                       const QString& source) {
  Profile profile;
  profile.key = key;
  profile.costs = std::move(costs);
  profile.config = parts.config;
  profile.repeats = parts.repeats;
  profile.host = parts.host;
  profile.libtorch = parts.libtorch;
  profile.source = source;
  return profile;
}

void PlanView::set_store(RunStore* store, const std::optional<RunConfig>& form) {
  store_ = store;
  unkept_.clear();
  shown_key_.clear();  // another database: its profile starts at its own middle budget
  fill_configurations({});
  // The profile of what the form trains, where this database has one: not the first profile of
  // another model while the form says this one.
  if (!form) return;
  for (std::size_t i = 0; i < profiles_.size(); ++i) {
    const Profile& profile = profiles_[i];
    if (plan::profile_key(*form, profile.repeats, profile.host, profile.libtorch) == profile.key) {
      configuration_->setCurrentIndex(static_cast<int>(i));
      return;
    }
  }
}

bool PlanView::export_chart_to(const QString& directory) {
  if (!may_replace(this, image_files(directory, "plan"))) {
    emit exportKept(directory);
    return false;
  }
  const QStringList written = export_images(directory, "plan");
  if (written.isEmpty()) {  // the chart has data whenever Export is enabled: the write failed
    emit exportFailed("Could not write the chart into " + QDir::toNativeSeparators(directory));
    return false;
  }
  emit chartExported(directory, written);
  return true;
}

void PlanView::refresh() {
  const Profile* current = selected();
  fill_configurations(current ? current->key : std::string());
}

void PlanView::fill_configurations(const std::string& keep_key) {
  profiles_.clear();
  store_problem_.clear();
  std::vector<std::pair<std::string, RunStore::KeptProfile>> kept_profiles;
  try {
    if (store_) kept_profiles = store_->chain_profiles();
  } catch (const std::exception& error) {  // a locked or damaged database: said, not fatal
    store_problem_ = QString::fromStdString(error.what());
  }
  for (const auto& [key, kept] : kept_profiles) {
    std::string refused;
    const auto parts = plan::read_profile_key(key, &refused);
    if (!parts) {  // another profiling method: never reused, so not offered
      // One whose settings this build cannot read is not offered either, but said.
      if (!refused.empty() && store_problem_.isEmpty())
        store_problem_ = QString::fromStdString(refused);
      continue;
    }
    ChainCosts costs;
    try {
      costs = plan::chain_costs_from_json(nlohmann::json::parse(kept.costs));
    } catch (const std::exception&) {
      continue;  // a row this build cannot read; a new profile replaces it
    }
    // Two stages a block, as the key's model has: anything else was not written by a profile.
    if (static_cast<int64_t>(costs.stages.size()) != 2 * parts->config.model.layers) continue;
    profiles_.push_back(
        profile_of(key, *parts, std::move(costs),
                   QString::fromStdString("runs database: measured " + kept.measured)));
  }
  for (const Profile& profile : unkept_) {
    const bool kept = std::any_of(profiles_.begin(), profiles_.end(),
                                  [&](const Profile& p) { return p.key == profile.key; });
    if (!kept) profiles_.push_back(profile);
  }
  const QSignalBlocker quiet(configuration_);
  configuration_->clear();
  int keep_index = profiles_.empty() ? -1 : 0;
  for (std::size_t i = 0; i < profiles_.size(); ++i) {
    const Profile& profile = profiles_[i];
    const QString text = describe_configuration(profile.config, profile.host);
    configuration_->addItem(text);
    // The whole configuration first: the field is narrower than it on a small screen.
    configuration_->setItemData(
        static_cast<int>(i),
        text + "\n" + profile.source + QString(" · medians of %1").arg(profile.repeats),
        Qt::ToolTipRole);
    if (profile.key == keep_key) keep_index = static_cast<int>(i);
  }
  configuration_->setCurrentIndex(keep_index);
  show_profile();
}

void PlanView::add_profile(const QString& key, const ChainCosts& costs, const QString& source) {
  const auto parts = plan::read_profile_key(key.toStdString());
  if (!parts) return;
  bool kept = false;
  try {
    kept = store_ && store_->chain_profile(key.toStdString()).has_value();
  } catch (const std::exception&) {
    // Unreadable now: offered from memory, like a profile a read-only database could not keep.
  }
  if (!kept) unkept_.push_back(profile_of(key.toStdString(), *parts, costs, source));
  fill_configurations(key.toStdString());
}

bool PlanView::select_profile(const QString& key) {
  for (std::size_t i = 0; i < profiles_.size(); ++i) {
    if (profiles_[i].key == key.toStdString()) {
      configuration_->setCurrentIndex(static_cast<int>(i));
      return true;
    }
  }
  return false;
}

void PlanView::set_busy(bool busy, bool profiling) {
  profile_->setEnabled(!busy);
  profile_->setText(profiling ? "Profiling …" : "Profile the form's configuration");
  profile_->setToolTip(busy && !profiling ? "The window is training; profile when it is done"
                                          : kProfileHelp);
}

const PlanView::Profile* PlanView::selected() const {
  const int index = configuration_->currentIndex();
  if (index < 0 || index >= static_cast<int>(profiles_.size())) return nullptr;
  return &profiles_[static_cast<std::size_t>(index)];
}

std::optional<RunConfig> PlanView::configuration() const {
  const Profile* profile = selected();
  if (!profile) return std::nullopt;
  return profile->config;
}

QString PlanView::profile_key() const {
  const Profile* profile = selected();
  return profile ? QString::fromStdString(profile->key) : QString();
}

double PlanView::tokens_per_s(double step_ms) const {
  const Profile* profile = selected();
  if (!profile || step_ms <= 0) return 0.0;
  return static_cast<double>(profile->config.tokens_per_step()) / (step_ms / 1e3);
}

void PlanView::show_profile() {
  hover_points_.clear();
  frontier_hover_points_.clear();
  chart_->clearItems();  // the uniform policies' names and the budget line: made anew here
  budget_line_ = new QCPItemStraightLine(chart_);
  budget_line_->setPen(QPen(QColor(230, 140, 40), 1, Qt::DashLine));
  budget_line_->setVisible(false);
  for (QCPGraph* graph : {frontier_, uniform_, measured_plans_, measured_others_, chosen_}) {
    graph->data()->clear();
  }
  const Profile* profile = selected();
  const bool has = profile != nullptr;
  slider_->setEnabled(has);
  budget_->setEnabled(has);
  export_->setEnabled(has);
  if (!has) {
    show_no_profile();
    return;
  }
  const ChainCosts& costs = profile->costs;
  const int64_t layers = profile->config.model.layers;
  smallest_ = plan::smallest_feasible_budget(costs);
  largest_ = std::max(smallest_, plan::none_peak_bytes(costs));
  slider_->setEnabled(largest_ > smallest_);  // one budget for every plan: nothing to slide
  QString range = QString(
                      "From %1 MiB (the smallest budget any plan fits) to %2 MiB (none: "
                      "nothing recomputed) of activations, above the model states.")
                      .arg(mib(smallest_), mib(largest_));
  if (!store_problem_.isEmpty())
    range += " The database's profiles cannot be read: " + store_problem_;
  range_label_->setText(range);
  set_chart_title(chart_, "Plans under a memory budget: " +
                              describe_configuration(profile->config, profile->host));

  const auto predictions = plan::predict_uniform_policies(costs, layers);
  double top = draw_frontier(costs);
  top = std::max(top, draw_uniform_policies(predictions));
  draw_measured_runs(*profile);
  for (const QCPGraph* graph : {measured_plans_, measured_others_}) {
    for (auto point = graph->data()->constBegin(); point != graph->data()->constEnd(); ++point) {
      top = std::max(top, point->value);
    }
  }
  chart_->legend->setVisible(true);
  double right = static_cast<double>(largest_) / kMiB;
  for (const HoverPoint& point : hover_points_) right = std::max(right, point.x);
  chart_->xAxis->setRange(0.0, right * 1.08);
  chart_->yAxis->setRange(0.0, top * 1.12);
  name_uniform_policies(predictions);

  // The same profile drawn again (new runs) keeps the budget the user set, whatever it is;
  // another profile starts in the middle of its own range.
  const QString before = budget_->text();
  if (profile->key != shown_key_) set_budget_bytes((smallest_ + largest_) / 2);
  shown_key_ = profile->key;
  if (budget_->text() == before) on_budget_edited();  // no textChanged: plan it here
}

void PlanView::show_no_profile() {
  shown_key_.clear();
  set_chart_title(chart_, store_ ? "Plans under a memory budget: profile a configuration first"
                                 : "Plans under a memory budget: no database is open");
  range_label_->setText(
      !store_problem_.isEmpty()
          ? "The database's profiles cannot be read: " + store_problem_
          : "No configuration is profiled in this database yet: set the model, batch, "
            "precision and threads in the form, then Profile.");
  plan_.reset();
  chosen_hover_.reset();
  strip_->reset();  // not the last configuration's sublayers
  plan_label_->clear();
  {  // nor its budget, greyed in a disabled field
    const QSignalBlocker quiet_field(budget_);
    const QSignalBlocker quiet_slider(slider_);
    budget_->clear();
    slider_->setValue(0);
  }
  run_->setEnabled(false);
  reset_empty_axes(chart_);
  chart_->replot();
}

double PlanView::draw_frontier(const ChainCosts& costs) {
  double top = 0.0;
  for (const int64_t budget : plan::ladder_budgets(costs, kFrontierBudgets)) {
    if (const auto planned = plan::plan_under_budget(costs, budget)) {
      const double speed = tokens_per_s(planned->prediction.step_ms);
      frontier_->addData(static_cast<double>(budget) / kMiB, speed);
      frontier_hover_points_.push_back(
          {static_cast<double>(budget) / kMiB, speed,
           QString("budget %1 MiB: %2 · predicted %3 MiB, %4 tokens/s")
               .arg(mib(budget), QString::fromStdString(planned->plan.canonical()),
                    mib(planned->prediction.peak_bytes))
               .arg(speed, 0, 'f', 0)});
      top = std::max(top, speed);
    }
  }
  return top;
}

double PlanView::draw_uniform_policies(const std::vector<plan::PolicyPrediction>& predictions) {
  double top = 0.0;
  for (const auto& [policy, prediction] : predictions) {
    const double x = static_cast<double>(prediction.peak_bytes) / kMiB;
    const double y = tokens_per_s(prediction.step_ms);
    uniform_->addData(x, y);
    top = std::max(top, y);
    hover_points_.push_back({x, y,
                             QString("%1 · predicted %2 MiB, %3 ms a step (%4 tokens/s)")
                                 .arg(QString::fromStdString(policy), mib(prediction.peak_bytes))
                                 .arg(prediction.step_ms, 0, 'f', 0)
                                 .arg(y, 0, 'f', 0)});
  }
  return top;
}

std::optional<int64_t> PlanView::budget_bytes() const {
  try {
    return parse_byte_size(budget_->text().trimmed().toStdString(), "budget");
  } catch (const InvalidInput&) {
    return std::nullopt;
  }
}

void PlanView::set_budget_bytes(int64_t bytes) { budget_->setText(budget_text(bytes)); }

void PlanView::on_slider_moved(int value) {
  if (largest_ <= smallest_) return;
  set_budget_bytes(smallest_ + (largest_ - smallest_) * value / kSliderSteps);
}

void PlanView::on_budget_edited() {
  budget_problem_.clear();
  const std::string text = budget_->text().trimmed().toStdString();
  try {
    const int64_t bytes = parse_byte_size(text, "budget");
    if (largest_ > smallest_) {
      const QSignalBlocker quiet(slider_);
      const double within =
          static_cast<double>(std::clamp(bytes, smallest_, largest_) - smallest_) /
          static_cast<double>(largest_ - smallest_);
      slider_->setValue(static_cast<int>(std::lround(within * kSliderSteps)));
    }
  } catch (const InvalidInput& error) {
    budget_problem_ = in_form_words(error.reason_words());
  }
  budget_->setStyleSheet(budget_problem_.isEmpty() ? QString() : "color: #b00020;");
  replan();
}

void PlanView::replan() {
  plan_.reset();
  chosen_hover_.reset();
  chosen_->data()->clear();
  const Profile* profile = selected();
  const auto budget = budget_bytes();
  if (!profile) return;
  const auto stages = static_cast<int64_t>(profile->costs.stages.size());
  if (!budget) {
    plan_label_->setText("Budget: " + budget_problem_);
    budget_line_->setVisible(false);
    strip_->clear();
    run_->setEnabled(false);
    chart_->replot();
    return;
  }
  const double x = static_cast<double>(*budget) / kMiB;
  budget_line_->point1->setCoords(x, 0);
  budget_line_->point2->setCoords(x, 1);
  budget_line_->setVisible(true);
  plan_ = plan::plan_under_budget(profile->costs, *budget);
  if (!plan_) {
    strip_->clear();
    run_->setEnabled(false);
    plan_label_->setText(QString("No plan fits %1 MiB of activations: the smallest budget one "
                                 "fits is %2 MiB. (A run asked for this would end as oom.)")
                             .arg(mib(*budget), mib(smallest_)));
    chart_->replot();
    return;
  }
  const plan::PlanPrediction& p = plan_->prediction;
  chosen_->addData(static_cast<double>(p.peak_bytes) / kMiB, tokens_per_s(p.step_ms));
  chosen_hover_ =
      HoverPoint{static_cast<double>(p.peak_bytes) / kMiB, tokens_per_s(p.step_ms),
                 QString("the plan at %1: %2 · predicted %3 MiB, %4 tokens/s")
                     .arg(budget_->text().trimmed(),
                          QString::fromStdString(plan_->plan.canonical()), mib(p.peak_bytes))
                     .arg(tokens_per_s(p.step_ms), 0, 'f', 0)};
  strip_->set_plan(plan_->plan, stages);
  run_->setEnabled(true);
  plan_label_->setText(
      QString("<b>%1</b><br>predicted: %2 MiB of activations, %3 ms a step "
              "(%4 tokens/s), of which %5 ms recomputing · costs from %6")
          .arg(QString::fromStdString(plan_->plan.canonical()).toHtmlEscaped(), mib(p.peak_bytes))
          .arg(p.step_ms, 0, 'f', 0)
          .arg(tokens_per_s(p.step_ms), 0, 'f', 0)
          .arg(p.recompute_ms, 0, 'f', 0)
          .arg(profile->source.toHtmlEscaped()));
  chart_->replot();
}

QString PlanView::policy_text() const {
  const auto budget = budget_bytes();
  return budget ? "plan:" + budget_->text().trimmed() : QString();
}

void PlanView::request_run() {
  const Profile* profile = selected();
  if (!profile || !plan_) return;
  emit runRequested(QString::fromStdString(profile->key), profile->config, policy_text());
}

}  // namespace rematlab::ui
