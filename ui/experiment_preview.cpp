// The form's preview of what its policies recompute, and of its pipeline stages.
#include <QPlainTextEdit>
#include <QSpinBox>

#include "checkpoint/checkpoint_policy.h"
#include "common/errors.h"
#include "experiment_panel.h"
#include "field_errors.h"
#include "parallel/pipeline_schedule.h"

namespace rematlab::ui {

void ExperimentPanel::update_preview() {
  QStringList preview;
  for (const QString& policy : split_list(policies_, ';')) {
    try {
      const std::string text = split_policy_and_offload(policy.toStdString()).checkpoint;
      const CheckpointPolicy parsed = CheckpointPolicy::parse(text);
      if (parsed.is_plan()) {  // its segments are known once the run has measured its chain
        preview << policy + ": chosen when the run starts (the Plan tab shows it)";
        continue;
      }
      const auto plan = parsed.plan_for(layers_->value(), 0.0);
      preview << policy + ": " + QString::fromStdString(plan.describe());
    } catch (const InvalidInput&) {
      preview << policy + ": —";
    }
  }
  QString text = "Segments of each policy:\n" + preview.join("\n");
  const int stages = pipeline_stages_->value();
  if (stages > 1 && stages <= layers_->value()) {
    // Which blocks each stage runs, and how many micro-batches it holds at once under 1F1B.
    const std::vector<int64_t> bounds = stage_block_bounds(layers_->value(), stages);
    QStringList parts;
    for (int stage = 0; stage < stages; ++stage) {
      parts << QString("%1: blocks %2–%3, %4 in flight")
                   .arg(stage)
                   .arg(bounds[stage])
                   .arg(bounds[stage + 1] - 1)
                   .arg(parallel::micro_batches_in_flight(stage, stages, accum_->value()));
    }
    text += "\nStages (1F1B): " + parts.join("; ");
  }
  if (preview_->toPlainText() != text) preview_->setPlainText(text);
}

}  // namespace rematlab::ui
