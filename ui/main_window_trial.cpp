// "Try it here": the Scale tab's chosen layout given to the form, to be measured on this machine.
#include <QCheckBox>
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>

#include "common/byte_size.h"
#include "experiment_panel.h"
#include "main_window.h"
#include "run/pipeline_config.h"
#include "scale_view.h"

namespace rematlab::ui {

void MainWindow::on_layout_tried(const TrialLayout& trial) {
  if (trial.ranks > panel_->ranks_field()->maximum()) {
    status_->setText(QString("The layout has %1 ranks; the form runs at most %2")
                         .arg(trial.ranks)
                         .arg(panel_->ranks_field()->maximum()));
    return;
  }
  panel_->ranks_field()->setValue(trial.ranks);
  panel_->tensor_ranks_field()->setValue(trial.tensor_ranks);
  panel_->sequence_parallel_field()->setChecked(trial.sequence_parallel);
  panel_->pipeline_stages_field()->setValue(trial.pipeline_stages);
  panel_->virtual_stages_field()->setValue(trial.virtual_stages);
  // Balanced, the form balances its own model's stages (a list would name the planned model's
  // blocks); else the rule's split, as planned.
  panel_->pipeline_split_field()->setText(
      trial.balanced_split && trial.pipeline_stages > 1 ? QString(kBalancedSplit) : QString());
  // A pipeline needs a micro-batch a stage at least: the layout's own count.
  if (trial.pipeline_stages > 1) panel_->accum_field()->setValue(trial.accum);
  panel_->shard_field()->setCurrentText(trial.shard);
  // The planner's buckets in the engine's bytes; with one data rank nothing is bucketed.
  panel_->bucket_size_field()->setText(trial.bucket_bytes > 0 ? QString::number(trial.bucket_bytes)
                                                              : QString());
  panel_->policies_field()->setText(trial.policy);
  // Segment inputs wait in host memory on a GPU; the CPU's engine keeps them on disk.
  const auto form = panel_->first_config();
  const bool gpu = form && form->device.rfind("cuda", 0) == 0;
  panel_->offload_field()->setText(trial.offload_host ? (gpu ? "host" : "disk") : "none");
  status_->setText(
      QString("The form trains its model with %1 ranks, %2 tensor ranks%3%6, shard "
              "%4, %5: press Run to measure the layout here")
          .arg(trial.ranks)
          .arg(trial.tensor_ranks)
          .arg(trial.sequence_parallel ? " (sequence parallel)" : "")
          .arg(trial.shard + (trial.bucket_bytes > 0 ? QString(" in %1 buckets")
                                                           .arg(QString::fromStdString(
                                                               format_bytes(trial.bucket_bytes)))
                                                     : QString()))
          .arg(trial.policy)
          .arg(trial.pipeline_stages > 1
                   ? QString(", %1 pipeline stages%2 of %3 micro-batches")
                         .arg(trial.pipeline_stages)
                         .arg(trial.virtual_stages > 1
                                  ? QString(" × %1 chunks").arg(trial.virtual_stages)
                                  : QString())
                         .arg(trial.accum)
                   : QString()));
}

}  // namespace rematlab::ui
