// The window on a laptop's screen (issue 25): at 1024×600 and 1280×720 every control of every tab
// is inside the window and shown whole, and no text is cut without a tooltip that has it whole;
// legends never take a plot's room; the Runs table gets the width; nothing in the form moves
// while the user types.
#include <qcustomplot.h>

#include <QAbstractButton>
#include <QAbstractSpinBox>
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QFileInfo>
#include <QGroupBox>
#include <QHeaderView>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSlider>
#include <QSplitter>
#include <QTabBar>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QTest>
#include <cmath>

#include "chart_legend.h"
#include "chart_style.h"
#include "compare_view.h"
#include "elided_label.h"
#include "live_charts.h"
#include "plan_view.h"
#include "runs_view.h"
#include "window_bench.h"
#include "workbench_settings.h"

namespace {

using rematlab::ui::ChartLegend;
using rematlab::ui::ElidedLabel;
using rematlab::ui::LiveCharts;
using rematlab::ui::MainWindow;
using rematlab::ui::testing::Bench;
using rematlab::ui::testing::rect_in;
using rematlab::ui::testing::show_at;

bool is_control(QWidget* widget) {
  return qobject_cast<QAbstractButton*>(widget) || qobject_cast<QLineEdit*>(widget) ||
         qobject_cast<QComboBox*>(widget) || qobject_cast<QAbstractSpinBox*>(widget) ||
         qobject_cast<QSlider*>(widget) || qobject_cast<QLabel*>(widget) ||
         qobject_cast<ElidedLabel*>(widget) || qobject_cast<QTabBar*>(widget) ||
         qobject_cast<QProgressBar*>(widget) || qobject_cast<QCustomPlot*>(widget);
}

QString name_of(QWidget* widget) {
  QString text;
  if (auto* button = qobject_cast<QAbstractButton*>(widget)) text = button->text();
  if (auto* label = qobject_cast<QLabel*>(widget)) text = label->text();
  if (auto* label = qobject_cast<ElidedLabel*>(widget)) text = label->text();
  return QString("%1 '%2'").arg(widget->metaObject()->className(), text.left(60));
}

// The scroll area `widget` is inside, if any (the form's fields are reached by scrolling).
QScrollArea* scrolled_in(QWidget* widget) {
  for (QWidget* up = widget->parentWidget(); up; up = up->parentWidget()) {
    if (auto* area = qobject_cast<QScrollArea*>(up)) return area;
  }
  return nullptr;
}

// Every control of every tab inside the window (or inside a scroll area's widget, no wider than
// its view), shown at least as large as it needs, and every text it cuts whole in its tooltip.
void expect_everything_in_reach(MainWindow& window, const std::string& size) {
  const QRect inside = window.rect();
  for (int tab = 0; tab < window.tabs()->count(); ++tab) {
    window.tabs()->setCurrentIndex(tab);
    QApplication::processEvents();
    const std::string where = size + ", " + window.tabs()->tabText(tab).toStdString() + " tab: ";
    for (QWidget* widget : window.findChildren<QWidget*>()) {
      if (!widget->isVisibleTo(&window) || widget->window() != &window || !is_control(widget)) {
        continue;
      }
      if (QScrollArea* area = scrolled_in(widget)) {
        const QRect in_form = rect_in(widget, area->widget());
        EXPECT_LE(in_form.right(), area->viewport()->width())
            << where << name_of(widget).toStdString() << " is cut at the form's right edge";
        EXPECT_LE(area->widget()->width(), area->viewport()->width()) << where << "form too wide";
      } else {
        EXPECT_TRUE(inside.contains(rect_in(widget, &window)))
            << where << name_of(widget).toStdString() << " lies outside the window";
      }
      if (auto* button = qobject_cast<QAbstractButton*>(widget)) {
        EXPECT_GE(button->width(), button->minimumSizeHint().width())
            << where << name_of(widget).toStdString() << " is squeezed";
      }
      if (auto* label = qobject_cast<QLabel*>(widget); label && !label->text().isEmpty() &&
                                                       label->textFormat() != Qt::RichText &&
                                                       !label->text().contains('<')) {
        if (label->wordWrap()) {
          if (label->heightForWidth(label->width()) > label->height() + 1) {
            EXPECT_TRUE(label->toolTip().contains(label->text()))
                << where << name_of(widget).toStdString() << " is cut and has no tooltip";
          }
        } else {
          // Line by line: one cut by the layout, or elided by the window ("…"), is whole in
          // the tooltip.
          for (const QString& line : label->text().split('\n')) {
            const bool cut =
                label->fontMetrics().horizontalAdvance(line) > label->contentsRect().width() + 1;
            const QString shown = line.endsWith(QChar(0x2026)) ? line.chopped(1) : line;
            if (cut || shown != line) {
              EXPECT_TRUE(label->toolTip().contains(shown))
                  << where << name_of(widget).toStdString() << " is cut and has no tooltip";
            }
          }
        }
      }
      if (auto* label = qobject_cast<ElidedLabel*>(widget); label && label->elided()) {
        EXPECT_TRUE(label->toolTip().contains(label->text()))
            << where << name_of(widget).toStdString() << " is elided without a tooltip";
      }
      if (auto* combo = qobject_cast<QComboBox*>(widget)) {
        const int text = combo->fontMetrics().horizontalAdvance(combo->currentText());
        if (text > combo->width() - 30) {  // the arrow and the frame take about that much
          const QString tip =
              combo->toolTip() + combo->itemData(combo->currentIndex(), Qt::ToolTipRole).toString();
          EXPECT_TRUE(tip.contains(combo->currentText()))
              << where << name_of(widget).toStdString() << " cuts '"
              << combo->currentText().toStdString() << "' without a tooltip";
        }
      }
      if (auto* tabs = qobject_cast<QTabBar*>(widget)) {
        EXPECT_LE(tabs->tabRect(tabs->count() - 1).right(), tabs->width()) << where;
      }
    }
    for (ChartLegend* legend : window.findChildren<ChartLegend*>()) {
      if (!legend->isVisibleTo(&window)) continue;
      for (int i = 0; i < legend->count(); ++i) {
        const QString text = legend->item(i)->text();
        EXPECT_TRUE(legend->item(i)->toolTip().startsWith(text)) << where << text.toStdString();
      }
    }
  }
}

void fill_with_runs(Bench& bench) {
  bench.panel->policies_field()->setText("none; every:1; sublayer:1,2; selective; every:2");
  bench.panel->steps_field()->setValue(3);
  ASSERT_EQ(bench.run_sweep(), "ok");
  bench.panel->policies_field()->setText("none");
  bench.panel->budget_field()->setText("1KiB");  // a run that ends oom, with its reason
  ASSERT_EQ(bench.run_sweep(), "oom");
  bench.panel->budget_field()->clear();
}

TEST(WindowFit, At1024x600And1280x720EveryControlOfEveryTabIsInReachAndWhole) {
  Bench bench;
  fill_with_runs(bench);
  const std::vector<int64_t> ids = bench.window.runs_view()->shown_ids();
  bench.window.compare(QList<qint64>(ids.begin(), ids.end()));
  // A long status (an export's) and a long database path: elided, never widening the window.
  QStringList many;
  for (int i = 0; i < 20; ++i) many << bench.dir.filePath(QString("live-chart-%1.png").arg(i));
  bench.window.charts_exported(bench.dir.path(), many, 10);
  for (const auto& [width, height] : {std::pair{1024, 600}, {1280, 720}}) {
    const std::string size = std::to_string(width) + "x" + std::to_string(height);
    show_at(bench.window, width, height);
    EXPECT_LE(bench.window.width(), width) << size << ": the window is wider than the screen";
    EXPECT_LE(bench.window.height(), height) << size << ": the window is taller than the screen";
    EXPECT_LE(bench.window.minimumSizeHint().width(), width) << size;
    expect_everything_in_reach(bench.window, size);
  }
}

// True when a plotted point of `chart` lies under its legend.
bool legend_covers_data(QCustomPlot* chart) {
  if (!rematlab::ui::legend_on_screen(chart)) return false;
  const QRect legend = chart->legend->outerRect();
  for (int g = 0; g < chart->graphCount(); ++g) {
    QCPGraph* graph = chart->graph(g);
    for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) {
      if (!std::isfinite(it->value)) continue;
      const QPoint pixel = graph->coordsToPixels(it->key, it->value).toPoint();
      if (chart->axisRect()->rect().contains(pixel) && legend.contains(pixel)) return true;
    }
  }
  return false;
}

TEST(WindowFit, LegendsNeverTakeThePlotsRoomAndExportsHaveTheirOwnSize) {
  Bench bench;
  fill_with_runs(bench);
  const std::vector<int64_t> ids = bench.window.runs_view()->shown_ids();
  ASSERT_EQ(ids.size(), 6u);
  bench.window.compare(QList<qint64>(ids.begin(), ids.end()));
  // The last sweep drew one run; five on the Live tab as the hands-on test had them.
  bench.panel->policies_field()->setText("none; every:1; sublayer:1,2; selective; every:2");
  ASSERT_EQ(bench.run_sweep(), "ok");
  bench.window.compare(QList<qint64>(ids.begin(), ids.begin() + 5));
  const LiveCharts* live = bench.window.charts();
  ASSERT_EQ(live->run_count(), 5);
  // And a profile in the Plan tab, whose chart keeps its own legend (six fixed entries).
  QSignalSpy profiled(&bench.window, &MainWindow::profileEnded);
  bench.window.plan_view()->profile_button()->click();
  ASSERT_TRUE(profiled.wait(rematlab::ui::testing::kTimeoutMs));
  ASSERT_TRUE(bench.window.plan_view()->current_plan().has_value());
  for (const auto& [width, height, least] : {std::tuple{1280, 720, 100}, {1024, 600, 70}}) {
    show_at(bench.window, width, height);
    const std::vector<std::pair<const char*, QCustomPlot*>> charts = {
        {"loss", live->plot(LiveCharts::kLoss)},
        {"memory", live->plot(LiveCharts::kMemory)},
        {"throughput", live->plot(LiveCharts::kThroughput)},
        {"timeline", live->plot(LiveCharts::kTimeline)},
        {"activation", bench.window.compare_view()->activation_chart()},
        {"pareto", bench.window.compare_view()->scatter_chart()},
        {"compare loss", bench.window.compare_view()->loss_chart()},
        {"step memory", bench.window.compare_view()->step_memory_chart()},
        {"plan", bench.window.plan_view()->chart()}};
    for (const auto& [name, chart] : charts) {
      for (QWidget* tab : {static_cast<QWidget*>(bench.window.charts()),
                           static_cast<QWidget*>(bench.window.compare_view()),
                           static_cast<QWidget*>(bench.window.plan_view())}) {
        if (tab->isAncestorOf(chart)) bench.window.tabs()->setCurrentWidget(tab);
      }
      QApplication::processEvents();
      chart->replot(QCustomPlot::rpImmediateRefresh);
      const std::string at = std::to_string(width) + "x" + std::to_string(height) + " " + name;
      EXPECT_GE(chart->axisRect()->rect().height(), least) << at << ": the plot is squeezed";
      EXPECT_FALSE(legend_covers_data(chart)) << at << ": the legend covers a plotted point";
      if (rematlab::ui::legend_on_screen(chart)) {
        EXPECT_LT(chart->legend->outerRect().height(), chart->axisRect()->rect().height() / 2)
            << at << ": the legend takes the plot's room";
      }
    }
    // The Live tab names its runs once, in a legend no more than three rows high; Compare's
    // table, a swatch of each run's colour beside its name, is that tab's legend.
    EXPECT_LE(live->legend()->height(),
              ChartLegend::kMaxRows * (live->legend()->fontMetrics().height() + 12));
    EXPECT_GE(live->legend()->count(), 5);
    const QTableWidget* table = bench.window.compare_view()->table();
    for (int row = 0; row < table->rowCount(); ++row) {
      EXPECT_EQ(table->item(row, 0)->data(Qt::DecorationRole).value<QColor>(),
                table->item(row, 0)->foreground().color());
    }
  }
  // Exported at their own size, whatever the window's: 1000 px wide (at twice the pixels), the
  // plot 600 px high and the legend's rows under it.
  const QStringList written = live->export_images(bench.dir.path(), "live");
  ASSERT_EQ(written.size(), 8);
  const QImage loss(bench.dir.filePath("live-loss.png"));
  EXPECT_EQ(loss.width(), 2 * rematlab::ui::kExportPlotSize.width());
  EXPECT_GT(loss.height(), 2 * rematlab::ui::kExportPlotSize.height())
      << "the exported chart has no legend under its plot";
  // And the screen is as it was: the charts' own legends are for exports only.
  EXPECT_FALSE(rematlab::ui::legend_on_screen(live->plot(LiveCharts::kLoss)));
}

TEST(WindowFit, TheRunsTableGetsTheWidthAndShowsWhatMattersFirst) {
  Bench bench;
  fill_with_runs(bench);
  rematlab::ui::RunsView* runs = bench.window.runs_view();
  QTableView* table = runs->table();
  QHeaderView* header = table->horizontalHeader();
  auto column = [&](const QString& name) {
    for (int c = 0; c < header->count(); ++c) {
      if (table->model()->headerData(c, Qt::Horizontal).toString() == name) return c;
    }
    return -1;
  };
  bench.window.tabs()->setCurrentWidget(runs);
  show_at(bench.window, 1280, 720);
  // The table spans the tab: the advisor is under it, not beside it.
  EXPECT_GE(table->width(), runs->width() * 9 / 10);
  for (const char* name : {"id", "status", "name", "peak", "tokens/s", "final loss", "reason"}) {
    const int c = column(name);
    ASSERT_GE(c, 0) << name;
    EXPECT_LE(header->sectionViewportPosition(c) + header->sectionSize(c),
              table->viewport()->width())
        << name << " needs scrolling sideways at 1280x720";
  }
  // A cut cell (the reason of the oom run) has its whole text in the tooltip.
  const int reason = column("reason");
  for (int row = 0; row < table->model()->rowCount(); ++row) {
    const QModelIndex cell = table->model()->index(row, reason);
    if (!cell.data().toString().isEmpty()) {
      EXPECT_TRUE(cell.data(Qt::ToolTipRole).toString().contains(cell.data().toString()));
    }
  }
  show_at(bench.window, 1920, 1080);
  EXPECT_EQ(table->horizontalScrollBar()->maximum(), 0) << "columns cut at 1920x1080";
}

// Where every field of the form is, in the window's coordinates.
std::vector<QRect> form_layout(Bench& bench) {
  std::vector<QRect> rects;
  QWidget* form = bench.panel->scroll_area()->widget();
  // The form's own widgets: its groups and what they lay out (not a field's inner parts, such as
  // the warning sign a line edit shows inside itself).
  for (QWidget* field : form->findChildren<QWidget*>()) {
    const QWidget* parent = field->parentWidget();
    const bool laid_out = parent == form || qobject_cast<const QGroupBox*>(parent);
    if (laid_out && field->isVisibleTo(form)) rects.push_back(rect_in(field, &bench.window));
  }
  return rects;
}

TEST(WindowFit, NothingInTheFormMovesWhileTheUserTypesPolicies) {
  Bench bench;
  show_at(bench.window, 1280, 720);
  QLineEdit* policies = bench.panel->policies_field();
  policies->setFocus(Qt::MouseFocusReason);
  policies->selectAll();
  QTest::keyClick(policies, Qt::Key_Delete);
  QApplication::processEvents();
  const std::vector<QRect> before = form_layout(bench);
  // Each keystroke changes the segments preview (a policy appears, its segments grow, a typo is
  // a dash): the fields above and below it stay where the user saw them.
  for (const QChar typed : QString("none; every:1; sublayer:1,2; selective; every:2; keep:qkv")) {
    QTest::keyClick(policies, typed.toLatin1());
    QApplication::processEvents();
    ASSERT_TRUE(form_layout(bench) == before)
        << "the form moved after typing '" << policies->text().toStdString() << "'";
  }
  EXPECT_EQ(policies->text(), "none; every:1; sublayer:1,2; selective; every:2; keep:qkv");
  // Every policy is in the preview, reached by scrolling it.
  const QString preview = bench.panel->segments_preview()->toPlainText();
  for (const QString& policy : policies->text().split(';')) {
    EXPECT_TRUE(preview.contains(policy.trimmed() + ": ")) << policy.toStdString();
  }
  // The Budget field is where it was, and what is typed there lands there.
  QLineEdit* budget = bench.panel->budget_field();
  QTest::mouseClick(budget, Qt::LeftButton);
  QTest::keyClicks(budget, "1KiB");
  EXPECT_EQ(budget->text(), "1KiB");
  EXPECT_TRUE(bench.panel->summary().contains("1KiB budget"))
      << bench.panel->summary().toStdString();
}

TEST(Window, RunStopAndTheStatusBarAreInViewAt1280x720) {
  Bench bench;
  show_at(bench.window, 1280, 720);
  EXPECT_LE(bench.window.width(), 1280);  // no minimum size pushes it past the screen
  EXPECT_LE(bench.window.height(), 720);
  const QRect window = bench.window.rect();
  for (QWidget* widget : std::initializer_list<QWidget*>{
           bench.panel->run_button(), bench.panel->stop_button(), bench.panel->check_button(),
           bench.window.progress_bar(), bench.panel->problem_label()}) {
    EXPECT_TRUE(widget->isVisible());
    EXPECT_TRUE(window.contains(rect_in(widget, &bench.window)))
        << widget->metaObject()->className() << " lies outside the window";
  }
  // The fields scroll; the buttons do not.
  QScrollBar* scroll = bench.panel->scroll_area()->verticalScrollBar();
  ASSERT_GT(scroll->maximum(), 0) << "the form fits at 720 px: this test checks nothing";
  const QRect run_before = rect_in(bench.panel->run_button(), &bench.window);
  scroll->setValue(scroll->maximum());
  QApplication::processEvents();
  EXPECT_EQ(rect_in(bench.panel->run_button(), &bench.window), run_before);
}

TEST(Window, WithoutASavedSizeItFitsTheScreen) {
  rematlab::ui::WorkbenchSettings().set_geometry({});
  QTemporaryDir dir;
  MainWindow window(dir.filePath("runs.sqlite"));
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  const QRect screen = window.screen()->availableGeometry();
  EXPECT_TRUE(screen.contains(window.frameGeometry()))
      << "window " << window.width() << "×" << window.height() << " on a screen of "
      << screen.width() << "×" << screen.height();
  EXPECT_GE(window.width(), screen.width() / 2);  // and uses it
}

TEST(Window, LegendsHideNoDataAndFitTheirCharts) {
  Bench bench;
  show_at(bench.window, 1280, 720);
  bench.panel->policies_field()->setText("none; every:1; sublayer:1,2");
  bench.panel->budget_field()->setText("64MiB");  // the budget line too
  ASSERT_EQ(bench.run_sweep(), "ok");
  std::vector<int64_t> ids = bench.window.runs_view()->shown_ids();
  bench.window.compare(QList<qint64>(ids.begin(), ids.end()));
  QApplication::processEvents();
  std::vector<std::pair<const char*, QCustomPlot*>> charts = {
      {"loss", bench.window.charts()->plot(LiveCharts::kLoss)},
      {"memory", bench.window.charts()->plot(LiveCharts::kMemory)},
      {"throughput", bench.window.charts()->plot(LiveCharts::kThroughput)},
      {"timeline", bench.window.charts()->plot(LiveCharts::kTimeline)},
      {"pareto", bench.window.compare_view()->scatter_chart()},
      {"compare loss", bench.window.compare_view()->loss_chart()}};
  for (const auto& [name, chart] : charts) {
    for (QWidget* tab : {static_cast<QWidget*>(bench.window.charts()),
                         static_cast<QWidget*>(bench.window.compare_view())}) {
      if (tab->isAncestorOf(chart)) bench.window.tabs()->setCurrentWidget(tab);
    }
    QApplication::processEvents();
    chart->replot(QCustomPlot::rpImmediateRefresh);
    ASSERT_GT(chart->legend->itemCount(), 0) << name;  // kept for exports in any case
    if (!rematlab::ui::legend_on_screen(chart)) {
      // Named once for the tab instead: the Live tab's legend above the charts, Compare's table
      // (a swatch of each run's colour beside its name).
      if (bench.window.compare_view()->isAncestorOf(chart)) {
        const QTableWidget* table = bench.window.compare_view()->table();
        ASSERT_EQ(table->rowCount(), 3) << name;
        EXPECT_TRUE(table->item(0, 0)->data(Qt::DecorationRole).canConvert<QColor>()) << name;
        continue;
      }
      const auto* legend = chart->parentWidget()->findChild<rematlab::ui::ChartLegend*>();
      ASSERT_NE(legend, nullptr) << name;
      EXPECT_TRUE(legend->isVisible()) << name;
      EXPECT_GE(legend->count(), 3) << name;
      continue;
    }
    EXPECT_FALSE(legend_covers_data(chart)) << name << ": the legend covers a plotted point";
    EXPECT_TRUE(chart->rect().contains(chart->legend->outerRect())) << name << ": legend cut";
    EXPECT_GT(chart->axisRect()->rect().height(), chart->legend->outerRect().height())
        << name << ": the legend is taller than its plot";
  }
  // Steps are whole numbers on every step axis.
  for (LiveCharts::Chart chart :
       {LiveCharts::kLoss, LiveCharts::kMemory, LiveCharts::kThroughput}) {
    for (double tick : bench.window.charts()->plot(chart)->xAxis->tickVector()) {
      EXPECT_EQ(tick, std::round(tick)) << "chart " << chart;
    }
  }
}

}  // namespace
