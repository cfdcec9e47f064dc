// The experiment form: model, data and training settings, and the sweep axes (checkpoint
// policies, offload, batch sizes, precisions, or a max-batch search under a budget). It builds a
// sweep spec that core validates; Ranks and Shard make its one run data-parallel, its ranks
// started by core's local launcher. Invalid input is shown at the field (marked, with the reason in
// its tooltip and in the footer's reserved line, so nothing moves) and every way to start is
// disabled. The fields scroll; the footer with Run, Stop and Check gradients never does. Nothing
// moves while the user types (the segments preview has a fixed height and scrolls), and a preset
// that would replace model values the user changed asks first.
#pragma once

#include <QHash>
#include <QWidget>
#include <nlohmann/json.hpp>
#include <optional>

#include "metatypes.h"
#include "sweep/sweep_spec.h"

class QAction;
class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QScrollArea;
class QSpinBox;

namespace rematlab::ui {

class ExperimentPanel : public QWidget {
  Q_OBJECT

 public:
  explicit ExperimentPanel(QWidget* parent = nullptr);

  // The sweep the form describes, or nullopt (and problem() says why) when it is invalid.
  std::optional<nlohmann::ordered_json> spec() const;
  // The first combination as one run.
  std::optional<RunConfig> first_config() const;
  // Data parallelism: how many ranks train the (one) run, and what they shard. A run on one
  // rank without sharding is a plain run in the window's own worker.
  int ranks() const;
  QString shard() const;
  // The data ranks' gradient buckets as --bucket-size takes them ("4MiB"); empty: the engine's.
  QString bucket_size() const;
  // Of the ranks, how many split each layer (tensor parallelism), and whether the sequence too.
  int tensor_ranks() const;
  bool sequence_parallel() const;
  int pipeline_stages() const;
  int virtual_stages() const;  // model chunks per pipeline stage
  // The blocks of each stage's chunks as --pp-split takes them: "" (the rule), "balanced" or
  // a list ("8,4").
  QString pipeline_split() const;
  // The fields above as the ranks' launcher takes them.
  RankLayout rank_layout() const;
  bool data_parallel() const {
    return ranks() > 1 || shard() != "none" || tensor_ranks() > 1 || sequence_parallel() ||
           pipeline_stages() > 1 || virtual_stages() > 1 || !pipeline_split().isEmpty();
  }
  // The first combination that checkpoints: what the gradient check compares against none.
  // nullopt when the form is invalid or every policy is none (check_problem() says which).
  std::optional<RunConfig> check_config() const;
  // Why the form cannot run, in the form's words ("Heads: 7 heads do not divide d_model 64").
  QString problem() const { return problem_; }
  QString check_problem() const { return check_problem_; }
  bool can_start() const;
  bool can_check() const;
  // What Run would do: "3 runs", and whether a budget ends runs as oom.
  QString summary() const;
  void set_running(bool running);
  // Non-empty when the open database cannot be written: Run is disabled with this reason.
  void set_read_only_reason(const QString& reason);
  // Fills the form from a sweep spec (the fields the form has; others keep their values).
  void load_spec(const nlohmann::ordered_json& spec);
  // Adds `policy` to the policies swept (unless it is there already).
  void add_policy(const QString& policy);
  // Makes the form train `config`'s model, batch, precision, threads and device with `policy`
  // alone, in one process and without a budget; the training settings (steps, learning rate,
  // seed, data) and the experiment's name stay.
  void load_configuration(const RunConfig& config, const QString& policy);
  // A Hugging Face config.json's model into the model fields (the preset stays what the fields
  // were last set from, so choosing one asks before replacing them). Beside the button it says
  // the file's family and what the form cannot hold or RematLab does not model; false, with the
  // reason there, for a file that is not such a configuration (the fields are left as they are).
  bool load_model_config(const QString& path);
  QLabel* model_source_label() const { return model_source_; }
  QPushButton* open_model_config_button() const { return open_model_config_; }
  QString experiment_name() const;
  void set_experiment_name(const QString& name);
  // Every field as a sweep spec, valid or not (what the window restores after a restart), with
  // Ranks and Shard under "data_parallel" (a sweep spec has no such fields); empty when a list
  // cannot even be read.
  nlohmann::ordered_json form_values() const;

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
  QSpinBox* layers_field() const { return layers_; }
  QSpinBox* d_model_field() const { return d_model_; }
  QSpinBox* heads_field() const { return heads_; }
  QSpinBox* mlp_hidden_field() const { return mlp_hidden_; }
  QSpinBox* seq_len_field() const { return seq_len_; }
  QSpinBox* vocab_field() const { return vocab_; }
  QSpinBox* head_width_field() const { return head_width_; }
  QSpinBox* sliding_window_field() const { return sliding_window_; }
  QDoubleSpinBox* rope_theta_field() const { return rope_theta_; }
  QCheckBox* qkv_bias_field() const { return qkv_bias_; }
  QCheckBox* qk_norm_field() const { return qk_norm_; }
  QLineEdit* loss_chunks_field() const { return loss_chunks_; }
  QSpinBox* ranks_field() const { return ranks_; }
  QComboBox* shard_field() const { return shard_; }
  QLineEdit* bucket_size_field() const { return bucket_size_; }
  QSpinBox* tensor_ranks_field() const { return tensor_ranks_; }
  QCheckBox* sequence_parallel_field() const { return sequence_parallel_; }
  QSpinBox* pipeline_stages_field() const { return pipeline_stages_; }
  QSpinBox* virtual_stages_field() const { return virtual_stages_; }
  QLineEdit* pipeline_split_field() const { return pipeline_split_; }
  QSpinBox* accum_field() const { return accum_; }
  QComboBox* finetune_field() const { return finetune_; }
  QSpinBox* lora_rank_field() const { return lora_rank_; }
  QLineEdit* lora_targets_field() const { return lora_targets_; }
  QComboBox* base_precision_field() const { return base_precision_; }
  QLabel* parameters_label() const { return parameters_label_; }
  QPushButton* run_button() const { return run_; }
  QPushButton* stop_button() const { return stop_; }
  QPushButton* check_button() const { return check_; }
  QScrollArea* scroll_area() const { return scroll_; }
  QLabel* problem_label() const { return problem_label_; }
  QPlainTextEdit* segments_preview() const { return preview_; }

 signals:
  void sweepRequested(const QString& spec_json);
  void stopRequested();
  void checkRequested(const rematlab::RunConfig& config);
  // After every revalidation: whether Run and Check gradients can start may have changed.
  void actionsChanged();

 public slots:
  void request_run();

 private:
  // "a; b; c" → ["a", "b", "c"]; blank entries are dropped.
  static QStringList split_list(const QLineEdit* field, QChar separator);
  // load_spec's parts: the model and training fields from the spec's base, the swept lists and
  // the budget, the ranks and shard.
  void load_base_fields(const nlohmann::ordered_json& base);
  void load_sweep_fields(const nlohmann::ordered_json& spec, const nlohmann::ordered_json& base);
  void load_parallel_fields(const nlohmann::ordered_json& spec);
  void create_model_fields();
  // Fine-tuning (experiment_finetune.cpp): full, or LoRA with its rank, alpha and targets.
  void create_finetune_fields();
  QLayout* finetune_fields();
  void add_finetune_to(nlohmann::ordered_json& base) const;
  void load_finetune_fields(const nlohmann::ordered_json& base);
  void enable_finetune_fields();  // rank, alpha, targets and base only for LoRA
  // The attention's finer fields (experiment_attention_fields.cpp): head width, rotary base,
  // q/k/v biases, q/k norms.
  void create_attention_fields();
  void add_attention_rows(QFormLayout& model);
  void connect_attention_fields();
  void enable_attention_fields();  // Llama's only for llama
  void add_attention_to(nlohmann::ordered_json& base) const;
  void load_attention_fields(const nlohmann::ordered_json& base);
  void set_attention_fields(const ModelConfig& model);
  // "12.3 M parameters, 0.4 M of them trained" for the form's first run; empty without one.
  void show_parameters(const std::optional<RunConfig>& config);
  void create_training_fields();
  void create_rank_fields();
  void create_sweep_fields();
  void create_actions();
  void lay_out();
  // lay_out's parts: the field groups and the footer that never scrolls.
  QLayout* sweep_fields();
  QLayout* model_fields();
  QLayout* training_fields();
  QLayout* footer();
  void connect_fields();
  // The Preset field changed: asks before replacing model values the user changed, and puts the
  // preset back when the answer is to keep them.
  void on_preset_chosen(const QString& name);
  void apply_preset(const QString& name);
  // The model fields from `model` (a preset's, an imported configuration's).
  void set_model_fields(const ModelConfig& model);
  // Open config.json… (experiment_model_config.cpp): asks for a file, then load_model_config.
  void open_model_config();
  // The first model field whose range `model` is beyond ("1000 layers, more than the form's
  // 512"), or empty: a value beyond a spin box's range would be clamped into another model.
  QString field_beyond_the_form(const ModelConfig& model) const;
  void show_model_source_refusal(const QString& text);
  // "Blocks 3 → 12" for each model field whose value differs from preset `from`'s and that
  // preset `to` would change.
  QStringList edits_lost(const QString& from, const QString& to) const;
  void revalidate();
  void remember_field_help();  // each field's own tooltip, once, before any reason is added
  void update_preview();
  void mark_field(QWidget* bad_field);
  nlohmann::ordered_json build_spec() const;  // may throw InvalidInput for list syntax
  // Throws InvalidInput naming "ranks", "shard" or another rank field when the ranks cannot train
  // what the form describes (several runs, more ranks than this host allows, a shard the run
  // refuses, buckets that are not a size: those with one rank too).
  void check_data_parallel(const std::vector<SweepPoint>& points) const;
  QWidget* field_for(const QString& key) const;

  QLineEdit* name_;
  QComboBox* preset_;
  QComboBox* arch_;
  QSpinBox* layers_;
  QSpinBox* d_model_;
  QSpinBox* heads_;
  QSpinBox* kv_heads_;
  QSpinBox* mlp_hidden_;
  QCheckBox* tie_head_;
  QSpinBox* head_width_;
  QSpinBox* sliding_window_;
  QDoubleSpinBox* rope_theta_;
  QCheckBox* qkv_bias_;
  QCheckBox* qk_norm_;
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
  QSpinBox* ranks_;
  QComboBox* shard_;
  QLineEdit* bucket_size_;
  QSpinBox* tensor_ranks_;
  QCheckBox* sequence_parallel_;
  QSpinBox* pipeline_stages_;
  QSpinBox* virtual_stages_;
  QLineEdit* pipeline_split_;
  QComboBox* finetune_;
  QSpinBox* lora_rank_;
  QDoubleSpinBox* lora_alpha_;
  QLineEdit* lora_targets_;
  QComboBox* base_precision_;
  QLabel* parameters_label_;
  QPushButton* open_model_config_;
  QLabel* model_source_;  // what Open config.json… read, or why it could not
  QLineEdit* policies_;
  QLineEdit* offload_;
  QLineEdit* batch_;
  QLineEdit* precision_;
  QLineEdit* budget_;
  QCheckBox* max_batch_;
  QSpinBox* max_batch_limit_;
  QPlainTextEdit* preview_;
  QLabel* notation_;
  QLabel* runs_label_;
  QLabel* problem_label_;
  QPushButton* run_;
  QPushButton* stop_;
  QPushButton* check_;
  QScrollArea* scroll_;
  QAction* error_mark_;            // the warning sign inside a bad line edit
  QHash<QWidget*, QString> help_;  // each field's own tooltip, restored once it is valid
  QString problem_;
  QString check_problem_;
  QString read_only_reason_;
  bool running_ = false;
  bool loading_ = false;  // a spec is being loaded: its preset and values are taken as they are
  QString preset_name_;   // the preset the model fields were last set from
};

}  // namespace rematlab::ui
