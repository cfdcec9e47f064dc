// The Scale tab: how to train a model on a cluster (core/layout). Model, GPUs and batch fields;
// "Plan" searches every layout; the chart draws every layout evaluated (tokens/s against memory
// per GPU, fitting and not apart, the frontier joined, the GPU's memory a line), the grid the
// fastest fitting layout for each tensor (a mixture of experts: expert) × pipeline degree, the bar
// the chosen layout's memory per GPU by part against the GPU's. The list holds the fastest layouts
// (or, when none fits, the nearest with what they lack); the chosen one can be exported in
// Megatron-LM's, torchtitan's, DeepSpeed's or RematLab's terms, and where RematLab's engine runs
// its layout, "Try it here" hands its degrees, sharding and policy to the form (which keeps its own
// small model).
#pragma once

#include <QWidget>
#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "hover_point.h"
#include "layout/layout_search.h"

class QCheckBox;
class QComboBox;
class QGridLayout;
class QCustomPlot;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QThread;

namespace rematlab::ui {

class MemoryBar;

// What "Try it here" asks of the form: the layout's degrees, sharding, buckets, policy and
// offload.
struct TrialLayout {
  int ranks = 1;
  int tensor_ranks = 1;
  bool sequence_parallel = false;
  int pipeline_stages = 1;
  int virtual_stages = 1;       // model chunks per stage (interleaved 1F1B when above 1)
  int accum = 1;                // micro-batches per step (a pipeline needs one a stage at least)
  bool balanced_split = false;  // the stages' blocks balanced by their times, not the rule's
  QString shard;                // none, optimizer, gradients or parameters
  QString policy;
  bool offload_host = false;
  int64_t bucket_bytes = 0;  // the data ranks' buckets as run takes them; 0: one data rank
};

class ScaleView : public QWidget {
  Q_OBJECT

 public:
  explicit ScaleView(QWidget* parent = nullptr);
  ~ScaleView() override;

  // Starts a search of the fields' request in a thread (searchFinished when it ends); false
  // (and status() says why) when a field is bad or a search is running.
  bool plan();
  const std::optional<layout::LayoutRequest>& request() const { return request_; }
  const std::optional<layout::LayoutAnswer>& answer() const { return answer_; }
  // The layouts the list shows: the fastest that fit, or the nearest when none does.
  const std::vector<layout::LayoutEvaluation>& listed() const { return listed_; }
  // The chosen row's layout (the first after a search); none before one.
  const layout::LayoutEvaluation* chosen() const;
  void choose(int row);
  // The export the combo names, as shown in the text field.
  QString export_text() const;
  // The chosen export alone (no notes) into `path`, whole or not at all: what Save… writes once
  // the user has named the file. False, and status() says why, when it cannot.
  bool save_export(const QString& path);
  // What the chart says about the point nearest `pixel`, or empty.
  QString describe_point_at(QPointF pixel) const;

  QComboBox* model_field() const { return model_; }
  QComboBox* gpu_field() const { return gpu_; }
  QSpinBox* gpus_field() const { return gpus_; }
  QSpinBox* gpus_per_node_field() const { return per_node_; }
  QSpinBox* seq_len_field() const { return seq_len_; }
  QSpinBox* global_batch_field() const { return global_batch_; }
  QSpinBox* host_memory_field() const { return host_gib_; }
  QComboBox* precision_field() const { return precision_; }
  QComboBox* train_field() const { return train_; }
  QLineEdit* buckets_field() const { return buckets_; }
  QCheckBox* runnable_here_field() const { return runnable_here_; }
  QCheckBox* balanced_split_field() const { return balanced_split_; }
  QPushButton* plan_button() const { return plan_button_; }
  QTableWidget* layout_list() const { return list_; }
  QTableWidget* degree_grid() const { return grid_; }
  QCustomPlot* frontier_chart() const { return chart_; }
  MemoryBar* memory_bar() const { return bar_; }
  QComboBox* export_choice() const { return export_choice_; }
  QPushButton* try_button() const { return try_; }
  QPushButton* copy_button() const { return copy_; }
  QString status() const;

 signals:
  void tryRequested(const rematlab::ui::TrialLayout& trial);
  // A search ended: with an answer, or (false) with the reason in status().
  void searchFinished(bool answered);

 private:
  void build();
  QGridLayout* build_fields();
  // Throws InvalidInput naming the field's flag.
  layout::LayoutRequest read_request() const;
  void show_answer();
  void fill_list();
  // scale_view_charts.cpp
  void draw_frontier();
  void fill_grid();
  void draw_memory_bar();
  void show_export();
  void try_here();

  QComboBox* model_;
  QComboBox* gpu_;
  QSpinBox* gpus_;
  QSpinBox* per_node_;
  QSpinBox* seq_len_;
  QSpinBox* global_batch_;
  QSpinBox* host_gib_;
  QComboBox* precision_;
  QComboBox* train_;    // full, or LoRA on a base in fp32, bf16, int8 or nf4 (item data)
  QLineEdit* buckets_;  // as `layout --bucket-size` takes it; empty: kBucketValues
  QCheckBox* runnable_here_;
  QCheckBox* balanced_split_;  // --pp-split balanced
  QPushButton* plan_button_;
  QLabel* status_;
  QCustomPlot* chart_;
  QTableWidget* grid_;
  MemoryBar* bar_;
  QTableWidget* list_;
  QComboBox* export_choice_;
  QPlainTextEdit* export_text_;
  QString export_body_;  // the export without its notes: what Copy and Save write
  QPushButton* copy_;
  QPushButton* save_;
  QPushButton* try_;

  QThread* search_ = nullptr;  // the running search, if any
  // Set when the view goes: the running search stops at its next layout.
  std::shared_ptr<std::atomic<bool>> cancel_search_ = std::make_shared<std::atomic<bool>>(false);
  std::optional<layout::LayoutRequest> request_;
  std::optional<layout::LayoutAnswer> answer_;
  std::vector<layout::LayoutEvaluation> listed_;
  int chosen_row_ = -1;
  std::vector<HoverPoint> hover_points_;
};

}  // namespace rematlab::ui
