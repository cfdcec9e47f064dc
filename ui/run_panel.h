// The experiment form: model preset and overrides, training settings, checkpoint policy with a
// live preview of its segments. Invalid input is shown at the field and Run stays disabled.
#pragma once

#include <QWidget>

#include <optional>

#include "metatypes.h"

class QComboBox;
class QSpinBox;
class QDoubleSpinBox;
class QLineEdit;
class QLabel;
class QPushButton;

namespace rematlab::ui {

class RunPanel : public QWidget {
  Q_OBJECT

 public:
  explicit RunPanel(QWidget* parent = nullptr);

  // The configuration the form describes, or nullopt (and the reason shown) when it is invalid.
  std::optional<RunConfig> config() const;
  QString problem() const { return problem_; }
  void set_running(bool running);

  // For tests and scripted use.
  QLineEdit* checkpoint_field() const { return checkpoint_; }
  QSpinBox* steps_field() const { return steps_; }
  QPushButton* run_button() const { return run_; }
  QPushButton* stop_button() const { return stop_; }
  QPushButton* check_button() const { return check_; }

 signals:
  void runRequested(const rematlab::RunConfig& config);
  void stopRequested();
  void checkRequested(const rematlab::RunConfig& config);

 private:
  void apply_preset(const QString& name);
  void revalidate();

  QComboBox* preset_;
  QSpinBox* layers_;
  QSpinBox* d_model_;
  QSpinBox* heads_;
  QSpinBox* seq_len_;
  QComboBox* attention_;
  QDoubleSpinBox* dropout_;
  QSpinBox* batch_;
  QSpinBox* accum_;
  QSpinBox* steps_;
  QComboBox* precision_;
  QSpinBox* threads_;
  QLineEdit* checkpoint_;
  QLineEdit* budget_;
  QLabel* preview_;
  QLabel* problem_label_;
  QPushButton* run_;
  QPushButton* stop_;
  QPushButton* check_;
  QString problem_;
  bool running_ = false;
};

}  // namespace rematlab::ui
