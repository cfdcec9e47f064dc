// The form's preview of what its policies recompute, and of its pipeline stages.
#include <QPlainTextEdit>
#include <QSpinBox>

#include "checkpoint/checkpoint_policy.h"
#include "checkpoint/stage_blocks.h"
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
  const int chunks = virtual_stages_->value();
  const int accum = accum_->value();
  // What validate() refuses the problem line names; the preview shows only what can run.
  if (stages > 1 && stages * chunks <= layers_->value() && accum >= stages &&
      (chunks == 1 || accum % stages == 0)) {
    // Which blocks each stage runs, and how many micro-batches' chunks it holds at once.
    const std::vector<int64_t> bounds = stage_block_bounds(layers_->value(), stages * chunks);
    const parallel::PipelineSchedule schedule(stages, chunks, accum);
    QStringList parts;
    for (int stage = 0; stage < stages; ++stage) {
      QStringList blocks;
      for (int chunk = 0; chunk < chunks; ++chunk) {
        const auto at = static_cast<std::size_t>(chunk * stages + stage);
        const int64_t first = bounds[at];
        const int64_t last = bounds[at + 1] - 1;
        blocks << (first == last ? QString::number(first) : QString("%1–%2").arg(first).arg(last));
      }
      parts << QString("%1: blocks %2, %3 in flight")
                   .arg(stage)
                   .arg(blocks.join(" and "))
                   .arg(schedule.most_in_flight(stage));
    }
    text += QString("\nStages (%1): ").arg(chunks == 1 ? "1F1B" : "interleaved 1F1B") +
            parts.join("; ");
  }
  if (preview_->toPlainText() != text) preview_->setPlainText(text);
}

}  // namespace rematlab::ui
