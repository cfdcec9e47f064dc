// The Plan tab: the fastest checkpoint plan under a memory budget for one profiled configuration
// (a chain profile the runs database keeps, or one measured now for the form's configuration).
// The budget is a slider and a field; the chart shows the predicted frontier of plans (tokens/s
// against activation memory), the uniform policies predicted from the same profile and every
// measured run of that configuration in the database; the strip shows which sublayers the plan
// recomputes. "Run this plan" hands `plan:BUDGET` to the form. Planning takes milliseconds and
// happens here; measuring a profile takes the worker (profileRequested).
#pragma once

#include <QWidget>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hover_point.h"
#include "plan/frontier.h"
#include "plan/profile_key.h"
#include "plan/segment_planner.h"
#include "run/chain_costs.h"
#include "run/run_config.h"

class QComboBox;
class QCPGraph;
class QCPItemStraightLine;
class QCustomPlot;
class QLabel;
class QLineEdit;
class QPushButton;
class QSlider;

namespace rematlab {
class RunStore;
}

namespace rematlab::ui {

class PlanStrip;

class PlanView : public QWidget {
  Q_OBJECT

 public:
  explicit PlanView(QWidget* parent = nullptr);

  // The database whose profiles are offered and whose runs are drawn (null: none). Not owned.
  // The profile of `form` (what the form trains) is selected where the database has one.
  void set_store(RunStore* store, const std::optional<RunConfig>& form = std::nullopt);
  // Reads the database again (a sweep recorded runs, a profile was kept); keeps the selection.
  void refresh();
  // A profile just measured: offered (also when a read-only database could not keep it) and
  // selected.
  void add_profile(const QString& key, const ChainCosts& costs, const QString& source);
  // Selects the profile kept under `key`; false when there is none.
  bool select_profile(const QString& key);
  // While the window trains or profiles, Profile is disabled (`profiling`: saying so).
  void set_busy(bool busy, bool profiling);

  // The selected profile's configuration and key; nothing when none is selected.
  std::optional<RunConfig> configuration() const;
  QString profile_key() const;
  // The budget the field holds, or nothing (and budget_problem() says why).
  std::optional<int64_t> budget_bytes() const;
  QString budget_problem() const { return budget_problem_; }
  void set_budget_bytes(int64_t bytes);
  // The plan at the field's budget; nothing when none fits or no profile is selected.
  const std::optional<plan::PlannedChain>& current_plan() const { return plan_; }
  // The `plan:` policy "Run this plan" gives the form, e.g. "plan:127.8MiB".
  QString policy_text() const;
  // What the chart says about the point nearest `pixel` (within a few pixels), or empty.
  QString describe_point_at(QPointF pixel) const;
  // Writes DIRECTORY/NAME-frontier.png and .pdf when the chart has data; the paths written.
  QStringList export_images(const QString& directory, const QString& name) const;
  // What an exported chart's legend calls the budget line and the star (the plan at the budget).
  std::pair<QString, QString> export_names() const;
  QCPGraph* budget_key_graph() const { return budget_key_; }
  // The files export_images would write now (none when the chart is empty).
  QStringList image_files(const QString& directory, const QString& name) const;
  // Export chart…'s work once a folder is chosen: asks before replacing files there, says what
  // was written through chartExported (or why not through exportFailed).
  bool export_chart_to(const QString& directory);

  QComboBox* configuration_field() const { return configuration_; }
  QPushButton* profile_button() const { return profile_; }
  QSlider* budget_slider() const { return slider_; }
  QLineEdit* budget_field() const { return budget_; }
  QCustomPlot* chart() const { return chart_; }
  PlanStrip* strip() const { return strip_; }
  QLabel* plan_label() const { return plan_label_; }
  QPushButton* run_button() const { return run_; }
  QCPGraph* frontier_graph() const { return frontier_; }
  QCPGraph* uniform_graph() const { return uniform_; }
  QCPGraph* measured_plans_graph() const { return measured_plans_; }
  QCPGraph* measured_others_graph() const { return measured_others_; }
  QCPGraph* chosen_graph() const { return chosen_; }
  QPushButton* export_button() const { return export_; }

 signals:
  // Measure the form's configuration (the window runs it in the worker).
  void profileRequested();
  // Train `policy` (plan:BUDGET) on `config`, the configuration profiled under `key`.
  void runRequested(const QString& key, const rematlab::RunConfig& config, const QString& policy);
  // Export chart… wrote `written` (empty when nothing could be) into `directory`.
  void chartExported(const QString& directory, const QStringList& written);
  void exportFailed(const QString& message);
  // Export chart… found its files in `directory` and the user kept them: nothing was written.
  void exportKept(const QString& directory);

 private:
  // The constructor's steps, in order (then it shows the selected profile).
  void set_up_fields();
  void set_up_chart();
  void lay_out();
  void connect_signals();

  struct Profile {
    std::string key;
    ChainCosts costs;
    RunConfig config;
    int repeats = 0;
    std::string host;
    std::string libtorch;
    QString source;  // "runs database: measured …"
  };

  static Profile profile_of(const std::string& key, const plan::ProfiledConfiguration& parts,
                            ChainCosts costs, const QString& source);
  void fill_configurations(const std::string& keep_key);
  void show_profile();
  void show_no_profile();
  // Each draws its points (with their hover texts) and returns the highest tokens/s it drew.
  double draw_frontier(const ChainCosts& costs);
  double draw_uniform_policies(const std::vector<plan::PolicyPrediction>& predictions);
  void name_uniform_policies(const std::vector<plan::PolicyPrediction>& predictions);
  void draw_measured_runs(const Profile& profile);
  void on_slider_moved(int value);
  void on_budget_edited();
  void replan();
  void request_run();
  const Profile* selected() const;
  double tokens_per_s(double step_ms) const;

  RunStore* store_ = nullptr;
  std::vector<Profile> profiles_;
  std::vector<Profile> unkept_;  // measured here, not in the (read-only) database
  int64_t smallest_ = 0;         // the selected profile's smallest feasible budget
  int64_t largest_ = 0;          // and none's peak
  std::optional<plan::PlannedChain> plan_;
  QString budget_problem_;
  QString store_problem_;  // why the database's profiles could not be read
  std::string shown_key_;  // the profile drawn last: its budget stays across refreshes
  std::vector<HoverPoint> hover_points_;           // policies and measured runs
  std::vector<HoverPoint> frontier_hover_points_;  // the predicted frontier's samples
  std::optional<HoverPoint> chosen_hover_;         // the plan at the budget

  QComboBox* configuration_;
  QPushButton* profile_;
  QSlider* slider_;
  QLineEdit* budget_;
  QLabel* range_label_;
  QCustomPlot* chart_;
  QCPGraph* frontier_;
  QCPGraph* uniform_;
  QCPGraph* measured_plans_;
  QCPGraph* measured_others_;
  QCPGraph* chosen_;
  QCPGraph* budget_key_;                        // no points: the budget line's entry in the legend
  QCPItemStraightLine* budget_line_ = nullptr;  // made by show_profile, with the chart's items
  PlanStrip* strip_;
  QLabel* plan_label_;
  QPushButton* run_;
  QPushButton* export_;
};

}  // namespace rematlab::ui
