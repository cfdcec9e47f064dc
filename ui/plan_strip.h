// A checkpoint plan drawn along the model: one cell per sublayer (a0, m0, a1, …), recomputed
// segments filled and bracketed, kept sublayers plain; the embedding before and the head after.
// Hovering a cell says what happens to it.
#pragma once

#include <QWidget>
#include <vector>

#include "checkpoint/checkpoint_policy.h"

namespace rematlab::ui {

class PlanStrip : public QWidget {
  Q_OBJECT

 public:
  explicit PlanStrip(QWidget* parent = nullptr);

  // `stages` sublayers; an empty plan (no plan fits) draws the sublayers greyed.
  void set_plan(const CheckpointPlan& plan, int64_t stages);
  // No plan for these sublayers (none fits): they are drawn greyed.
  void clear();
  // No configuration at all (none profiled, another database): nothing is drawn.
  void reset();

  // Per sublayer: is it recomputed in backward? (What the cells show; for tests.)
  const std::vector<bool>& recomputed() const { return recomputed_; }
  // What hovering sublayer `stage` says.
  QString describe_stage(int64_t stage) const;
  // The sublayer under `position` (widget coordinates), or -1.
  int64_t stage_at(QPoint position) const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  QRectF cell(int64_t stage) const;

  CheckpointPlan plan_;
  std::vector<bool> recomputed_;
  bool has_plan_ = false;
};

}  // namespace rematlab::ui
