// The Plan tab's chart beyond its curves: the uniform policies' names beside their points, the
// measured runs of the profiled configuration, what hovering a point says, and the exported
// image (which names the budget and the plan at it).
#include <qcustomplot.h>

#include <QLineEdit>
#include <algorithm>
#include <optional>

#include "chart_style.h"
#include "checkpoint/checkpoint_policy.h"
#include "common/errors.h"
#include "plan/profile_key.h"
#include "plan_view.h"
#include "store/run_store.h"
#include "units.h"

namespace rematlab::ui {
namespace {

constexpr double kHoverPixels = 8.0;

// A policy's kind as core reads it; none for text that is no policy (a record can hold anything).
std::optional<CheckpointPolicy::Kind> kind_of(const std::string& policy) {
  try {
    return CheckpointPolicy::parse(policy).kind();
  } catch (const InvalidInput&) {
    return std::nullopt;
  }
}

// Whether a recorded run is one the predictions speak for: trained in one process, without
// offload (which the chain costs do not model), and measured. Not one with recorded settings
// this build could not read: its profile key would be made from their defaults, so it could be
// drawn as a measurement of a configuration it did not train.
bool comparable(const RunRecord& run) {
  return run.status == RunStatus::kOk && run.has_result && run.result.tokens_per_s > 0 &&
         run.config.offload == "none" && run.config.world_size <= 1 &&
         run.unread_config_fields.empty();
}

}  // namespace

// Each uniform policy's name beside its point, above it or else below; a name that would cover
// another is left out (hovering the point still says it). Sizes are fractions of the axes, so
// the choice holds at any size the chart is shown or exported at.
void PlanView::name_uniform_policies(const std::vector<plan::PolicyPrediction>& predictions) {
  constexpr double kCharWidth = 0.011;  // of the x range, at 7 pt on a chart ≥ 600 px wide
  constexpr double kLineHeight = 0.045;
  QFont small = font();
  small.setPointSizeF(7);
  const double width = chart_->xAxis->range().size();
  const double height = chart_->yAxis->range().size();
  std::vector<QRectF> taken;  // in fractions of the axes
  // none and every:K first: the policies most people compare with keep their names.
  std::vector<plan::PolicyPrediction> ordered;
  for (const bool sublayer : {false, true}) {
    for (const auto& each : predictions) {
      if ((kind_of(each.policy) == CheckpointPolicy::Kind::kSublayer) == sublayer)
        ordered.push_back(each);
    }
  }
  for (const auto& [policy, prediction] : ordered) {
    const double x = static_cast<double>(prediction.peak_bytes) / kMiB / width;
    const double y = tokens_per_s(prediction.step_ms) / height;
    const double w = kCharWidth * static_cast<double>(policy.size());
    for (const bool above : {true, false}) {
      const QRectF box(x - w / 2, above ? y : y - kLineHeight, w, kLineHeight);
      if (std::any_of(taken.begin(), taken.end(),
                      [&](const QRectF& other) { return other.intersects(box); })) {
        continue;
      }
      taken.push_back(box);
      auto* name = new QCPItemText(chart_);
      name->position->setCoords(x * width, y * height);
      name->setPositionAlignment(Qt::AlignHCenter | (above ? Qt::AlignBottom : Qt::AlignTop));
      name->setPadding(QMargins(0, 4, 0, 4));
      name->setText(QString::fromStdString(policy));
      name->setFont(small);
      name->setColor(QColor(90, 90, 90));
      break;
    }
  }
}

void PlanView::draw_measured_runs(const Profile& profile) {
  if (!store_) return;
  std::vector<RunRecord> runs;
  try {
    runs = store_->runs();
  } catch (const std::exception&) {
    return;  // the chart shows the predictions; the Runs tab reports the database's trouble
  }
  for (const RunRecord& run : runs) {
    if (!comparable(run)) continue;
    if (plan::profile_key(run.config, profile.repeats, run.host, run.libtorch) != profile.key) {
      continue;
    }
    const double x = static_cast<double>(run.result.peak_activation_bytes) / kMiB;
    const double y = run.result.tokens_per_s;
    const bool planned =
        run.request.plan || kind_of(run.config.checkpoint) == CheckpointPolicy::Kind::kSegments;
    (planned ? measured_plans_ : measured_others_)->addData(x, y);
    QString text = QString("#%1 %2 · measured %3 MiB, %4 ms a step (%5 tokens/s)")
                       .arg(run.id)
                       .arg(QString::fromStdString(run.config.checkpoint))
                       .arg(mib(run.result.peak_activation_bytes))
                       .arg(run.result.step_ms, 0, 'f', 0)
                       .arg(y, 0, 'f', 0);
    if (run.request.plan && !run.request.plan->chosen.empty()) {
      text += QString(" · %1 predicted %2 MiB, %3 ms")
                  .arg(QString::fromStdString(run.request.plan->requested),
                       mib(run.request.plan->predicted_peak_bytes))
                  .arg(run.request.plan->predicted_step_ms, 0, 'f', 0);
    }
    hover_points_.push_back({x, y, text});
  }
}

QString PlanView::describe_point_at(QPointF pixel) const {
  std::vector<const HoverPoint*> points;
  if (chosen_hover_) points.push_back(&*chosen_hover_);  // drawn on top: said first
  for (const HoverPoint& point : hover_points_) points.push_back(&point);
  // The frontier's corners last: where one meets a policy's point, the policy is named.
  for (const HoverPoint& point : frontier_hover_points_) points.push_back(&point);
  return nearest_point_text(chart_, points, pixel, kHoverPixels);
}

// Exported, the chart names everything it draws: the budget line with its value and the plan
// at the budget (the star) with its segments and prediction, which the screen shows beside it.
std::pair<QString, QString> PlanView::export_names() const {
  QString budget = budget_key_->name();
  QString star = chosen_->name();
  if (budget_line_ && budget_line_->visible()) {
    budget = "the budget, " + budget_->text().trimmed() + " (dashed line)";
  }
  if (plan_) {
    const plan::PlanPrediction& p = plan_->prediction;
    star = QString("the plan at the budget: %1 (predicted %2 MiB, %3 tokens/s)")
               .arg(QString::fromStdString(plan_->plan.canonical()), mib(p.peak_bytes))
               .arg(tokens_per_s(p.step_ms), 0, 'f', 0);
  }
  return {budget, star};
}

QStringList PlanView::export_images(const QString& directory, const QString& name) const {
  const QString budget_name = budget_key_->name();
  const QString star_name = chosen_->name();
  const auto [budget, star] = export_names();
  budget_key_->setName(budget);
  chosen_->setName(star);
  const QStringList written = save_charts({{"frontier", chart_}}, directory, name);
  budget_key_->setName(budget_name);
  chosen_->setName(star_name);
  return written;
}

QStringList PlanView::image_files(const QString& directory, const QString& name) const {
  return chart_files({{"frontier", chart_}}, directory, name);
}

}  // namespace rematlab::ui
