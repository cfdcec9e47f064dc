// The experiment form: model, data and training settings, and the sweep axes (checkpoint
// policies, offload, batch sizes, precisions, or a max-batch search under a budget). It builds a
// sweep spec that core validates; invalid input is shown at the field and Run stays disabled,
// with the reason.
#pragma once

#include <QWidget>
#include <nlohmann/json.hpp>
#include <optional>

#include "metatypes.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;

namespace rematlab::ui {

class ExperimentPanel : public QWidget {
  Q_OBJECT

 public:
  explicit ExperimentPanel(QWidget* parent = nullptr);

  // The sweep the form describes, or nullopt (and problem() says why) when it is invalid.
  std::optional<nlohmann::ordered_json> spec() const;
  // The first combination as one run: what the gradient check uses.
  std::optional<RunConfig> first_config() const;
  QString problem() const { return problem_; }
  void set_running(bool running);
  // Non-empty when the open database cannot be written: Run is disabled with this reason.
  void set_read_only_reason(const QString& reason);
  // Fills the form from a sweep spec (the fields the form has; others keep their values).
  void load_spec(const nlohmann::ordered_json& spec);
  QString experiment_name() const;
  void set_experiment_name(const QString& name);

  // For tests and scripted use.
  QLineEdit* policies_field() const { return policies_; }
  QComboBox* data_field() const { return data_; }
  QLineEdit* data_file_field() const { return data_file_; }
  QLineEdit* offload_field() const { return offload_; }
  QLineEdit* batch_field() const { return batch_; }
  QLineEdit* budget_field() const { return budget_; }
  QCheckBox* max_batch_box() const { return max_batch_; }
  QSpinBox* steps_field() const { return steps_; }
  QComboBox* preset_field() const { return preset_; }
  QComboBox* arch_field() const { return arch_; }
  QSpinBox* kv_heads_field() const { return kv_heads_; }
  QLineEdit* loss_chunks_field() const { return loss_chunks_; }
  QPushButton* run_button() const { return run_; }
  QPushButton* stop_button() const { return stop_; }
  QPushButton* check_button() const { return check_; }

 signals:
  void sweepRequested(const QString& spec_json);
  void stopRequested();
  void checkRequested(const rematlab::RunConfig& config);

 public slots:
  void request_run();

 private:
  void create_model_fields();
  void create_training_fields();
  void create_sweep_fields();
  void create_actions();
  void lay_out();
  void connect_fields();
  void apply_preset(const QString& name);
  void revalidate();
  nlohmann::ordered_json build_spec() const;  // may throw InvalidInput for list syntax
  QWidget* field_for(const std::string& error_field) const;

  QLineEdit* name_;
  QComboBox* preset_;
  QComboBox* arch_;
  QSpinBox* layers_;
  QSpinBox* d_model_;
  QSpinBox* heads_;
  QSpinBox* kv_heads_;
  QSpinBox* mlp_hidden_;
  QCheckBox* tie_head_;
  QLineEdit* loss_chunks_;
  QSpinBox* seq_len_;
  QSpinBox* vocab_;
  QComboBox* attention_;
  QDoubleSpinBox* dropout_;
  QComboBox* data_;
  QLineEdit* data_file_;
  QPushButton* browse_;
  QSpinBox* accum_;
  QSpinBox* steps_;
  QDoubleSpinBox* lr_;
  QSpinBox* seed_;
  QSpinBox* threads_;
  QComboBox* device_;
  QLineEdit* policies_;
  QLineEdit* offload_;
  QLineEdit* batch_;
  QLineEdit* precision_;
  QLineEdit* budget_;
  QCheckBox* max_batch_;
  QSpinBox* max_batch_limit_;
  QLabel* preview_;
  QLabel* runs_label_;
  QLabel* problem_label_;
  QPushButton* run_;
  QPushButton* stop_;
  QPushButton* check_;
  QString problem_;
  QString read_only_reason_;
  bool running_ = false;
};

}  // namespace rematlab::ui
