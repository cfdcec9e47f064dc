#include "demo_screenshots.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QDir>
#include <QEventLoop>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTabWidget>
#include <QTimer>
#include <iostream>

#include "advice_panel.h"
#include "compare_view.h"
#include "experiment_panel.h"
#include "live_charts.h"
#include "main_window.h"
#include "plan_view.h"
#include "runs_view.h"
#include "store/run_store.h"

namespace rematlab::ui {
namespace {

// Does `act` and waits up to `ms` for `signal` of `sender`; false when it did not come.
template <typename Sender, typename Signal, typename Act>
bool act_and_wait(Sender* sender, Signal signal, Act act, int ms) {
  QEventLoop loop;
  QObject::connect(sender, signal, &loop, [&loop] { loop.exit(0); });
  QTimer::singleShot(ms, &loop, [&loop] { loop.exit(1); });
  act();
  return loop.exec() == 0;
}

}  // namespace

int run_demo_and_take_screenshots(const QString& database, const QString& directory) {
  MainWindow window(database);
  window.resize(1600, 1000);
  window.show();
  ExperimentPanel* panel = window.experiment_panel();
  panel->preset_field()->setCurrentText("tiny");
  panel->set_experiment_name("demo: interval study");
  panel->policies_field()->setText("none; every:1; sublayer:1,2");
  panel->steps_field()->setValue(150);
  // One training thread leaves a core to the window's replots: no oversubscription on 2 cores.
  panel->findChild<QSpinBox*>("threads")->setValue(1);

  const QString live = QDir(directory).filePath("live-view.png");
  const QString comparison = QDir(directory).filePath("compare-view.png");
  bool live_taken = false;
  QEventLoop loop;
  QObject::connect(&window, &MainWindow::sweepEnded, &loop, &QEventLoop::quit);
  QObject::connect(&window, &MainWindow::errorShown, &loop, [&](const QString& message) {
    std::cerr << "demo: " << message.toStdString() << std::endl;
    loop.exit(1);
  });
  // Mid-sweep: the last run half done, the earlier runs complete.
  QTimer poll;
  QObject::connect(&poll, &QTimer::timeout, &window, [&] {
    const LiveCharts* charts = window.charts();
    if (!live_taken && charts->run_count() == 3 && charts->points(LiveCharts::kLoss, 2) >= 75) {
      QTimer::singleShot(100, &window, [&] { window.grab().save(live); });
      live_taken = true;
    }
  });
  poll.start(20);
  panel->run_button()->click();
  if (loop.exec() != 0) return 1;
  poll.stop();
  if (!live_taken) window.grab().save(live);

  RunsView* runs = window.runs_view();
  runs->refresh();
  const std::vector<int64_t> ids = runs->shown_ids();
  QList<qint64> last_three;
  for (std::size_t i = ids.size() >= 3 ? ids.size() - 3 : 0; i < ids.size(); ++i)
    last_three << ids[i];
  window.compare(last_three);
  auto settle = [] {
    QEventLoop pause;
    QTimer::singleShot(300, &pause, &QEventLoop::quit);
    pause.exec();
  };
  settle();
  bool saved = window.grab().save(comparison);
  // Every tab on a small laptop screen: everything must still be in reach there. The Runs tab
  // with the advisor on the last run; the Plan tab on a profile of the demo's model.
  window.resize(1280, 720);
  settle();
  QStringList small;
  const auto take = [&](QWidget* tab, const char* file) {
    window.tabs()->setCurrentWidget(tab);
    settle();
    const QString path = QDir(directory).filePath(file);
    saved = window.grab().save(path) && saved;
    small << path;
  };
  take(window.compare_view(), "compare-view-1280x720.png");
  take(window.charts(), "live-view-1280x720.png");
  if (!ids.empty()) {
    act_and_wait(
        runs->advice_panel(), &AdvicePanel::diagnosisShown, [&] { runs->select_ids({ids.back()}); },
        60000);
  }
  take(runs, "runs-view-1280x720.png");
  saved = act_and_wait(
              &window, &MainWindow::profileEnded,
              [&] { window.plan_view()->profile_button()->click(); }, 300000) &&
          saved;
  take(window.plan_view(), "plan-view-1280x720.png");
  for (const QString& file : QStringList{live, comparison} + small)
    std::cout << file.toStdString() << "\n";
  std::cout << std::flush;
  return saved && QFile::exists(live) ? 0 : 1;
}

int save_plan_chart(const QString& database, const QString& file) {
  try {
    RunStore store(database.toStdString(), StoreAccess::kReadOnly, /*create=*/false);
    PlanView view;
    view.set_store(&store);
    if (!view.configuration()) {
      std::cerr << "rematlab: error: --plan-chart: " << database.toStdString()
                << " keeps no chain profile (run `rematlab-cli plan --db` first)\n";
      return 2;
    }
    if (!view.chart()->savePng(file, 1200, 720, 2.0)) {
      std::cerr << "rematlab: error: --plan-chart: cannot write " << file.toStdString() << "\n";
      return 2;
    }
    std::cout << "wrote " << file.toStdString() << "\n";
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "rematlab: error: " << error.what() << "\n";
    return 2;
  }
}

}  // namespace rematlab::ui
