// The form's preview of what its policies recompute, and of its pipeline stages.
#include <QPlainTextEdit>
#include <QSpinBox>

#include "checkpoint/checkpoint_policy.h"
#include "checkpoint/stage_blocks.h"
#include "common/errors.h"
#include "experiment_panel.h"
#include "field_errors.h"
#include "parallel/pipeline_schedule.h"
#include "run/pipeline_config.h"

namespace rematlab::ui {
namespace {

// Which blocks each stage runs, and how many micro-batches' chunks it holds at once; empty where
// validate() refuses the pipeline (the problem line names why) or there is none. A balanced
// split's blocks are known once the run has measured them; what each stage holds in flight is
// the schedule's either way.
QString stages_preview(int layers, int stages, int chunks, int accum, const QString& split) {
  if (stages < 2 || stages * chunks > layers || accum < stages ||
      (chunks > 1 && accum % stages != 0)) {
    return {};
  }
  const bool balanced = split == kBalancedSplit;
  std::vector<int64_t> bounds;
  try {
    if (!balanced) {
      bounds = chunk_block_bounds(layers, stages * chunks, parse_pp_split(split.toStdString()));
    }
  } catch (const std::exception&) {
    return {};  // a split of another count or sum
  }
  const parallel::PipelineSchedule schedule(stages, chunks, accum);
  QStringList parts;
  for (int stage = 0; stage < stages; ++stage) {
    const QString held = QString("%1 in flight").arg(schedule.most_in_flight(stage));
    if (balanced) {
      parts << QString("%1: %2").arg(stage).arg(held);
      continue;
    }
    QStringList blocks;
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const auto at = static_cast<std::size_t>(chunk * stages + stage);
      const int64_t first = bounds[at];
      const int64_t last = bounds[at + 1] - 1;
      blocks << (first == last ? QString::number(first) : QString("%1–%2").arg(first).arg(last));
    }
    parts << QString("%1: blocks %2, %3").arg(stage).arg(blocks.join(" and ")).arg(held);
  }
  return QString("\nStages (%1): ").arg(chunks == 1 ? "1F1B" : "interleaved 1F1B") +
         parts.join("; ") +
         (balanced ? "\nStage split: chosen when the run starts, from the blocks' measured times"
                   : "");
}

}  // namespace

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
  text += stages_preview(layers_->value(), pipeline_stages_->value(), virtual_stages_->value(),
                         accum_->value(), pipeline_split());
  if (preview_->toPlainText() != text) preview_->setPlainText(text);
}

}  // namespace rematlab::ui
