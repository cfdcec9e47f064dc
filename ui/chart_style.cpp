#include "chart_style.h"

#include <qcustomplot.h>

#include <QDir>
#include <QHelpEvent>
#include <QToolTip>

namespace rematlab::ui {
namespace {

// QCustomPlot reads a maximum of QWIDGETSIZE_MAX or more (margins included) as "not set" and falls
// back to the element's own hint: a million pixels is unbounded and still counts as set.
constexpr int kUnbounded = 1 << 20;
constexpr int kLegendRow = 2;
const char* const kWholeTitle = "rematlab_whole_title";
const char* const kSharedLegend = "rematlab_shared_legend";

QCPTextElement* title_of(QCustomPlot* chart) {
  return qobject_cast<QCPTextElement*>(chart->plotLayout()->element(0, 0));
}

bool legend_in_layout(QCustomPlot* chart) {
  return chart->plotLayout()->rowCount() > kLegendRow &&
         chart->plotLayout()->element(kLegendRow, 0) == chart->legend;
}

void put_legend_in_layout(QCustomPlot* chart) {
  chart->plotLayout()->addElement(kLegendRow, 0, chart->legend);
  chart->plotLayout()->setRowStretchFactor(kLegendRow, 0.001);
}

void take_legend_out(QCustomPlot* chart) {
  chart->plotLayout()->take(chart->legend);
  chart->plotLayout()->simplify();
}

// A legend takes its rows under the plot only while it is shown: hidden, or shared by the tab,
// it is out of the layout (a hidden one in it would still take the room of its entries).
void place_legend(QCustomPlot* chart) {
  const bool wanted = !chart->property(kSharedLegend).toBool() && chart->legend->visible() &&
                      chart->legend->itemCount() > 0;
  if (wanted && !legend_in_layout(chart)) put_legend_in_layout(chart);
  if (!wanted && legend_in_layout(chart)) take_legend_out(chart);
}

// As many legend columns as `width` holds for the widest entry; QCPLegend places its entries by
// the wrap only when told to rearrange them.
void fit_legend(QCustomPlot* chart, int width) {
  QCPLegend* legend = chart->legend;
  int widest = 1;
  for (int i = 0; i < legend->itemCount(); ++i) {
    // A cell of the grid may be empty (the last row of a wrapped legend); the size hint is
    // public on the base class.
    if (const QCPLayoutElement* item = legend->item(i))
      widest = std::max(widest, item->minimumOuterSizeHint().width());
  }
  const int room = width - legend->margins().left() - legend->margins().right();
  const int columns =
      std::max(1, (room + legend->columnSpacing()) / (widest + legend->columnSpacing()));
  if (columns != legend->wrap()) {
    legend->setWrap(columns);
    legend->setFillOrder(legend->fillOrder(), /*rearrange=*/true);
  }
}

// The title cut to the chart's width: a long one would otherwise be clipped at both ends.
void elide_title(QCustomPlot* chart) {
  QCPTextElement* title = title_of(chart);
  if (!title) return;
  const QString whole = title->property(kWholeTitle).toString();
  title->setText(QFontMetrics(title->font()).elidedText(whole, Qt::ElideRight, chart->width() - 8));
}

// The title broken into lines no wider than `width` (an exported chart shows it whole).
QString wrapped(const QString& text, const QFont& font, int width) {
  const QFontMetrics metrics(font);
  QStringList lines;
  QString line;
  for (const QString& word : text.split(' ')) {
    const QString longer = line.isEmpty() ? word : line + ' ' + word;
    if (!line.isEmpty() && metrics.horizontalAdvance(longer) > width) {
      lines << line;
      line = word;
    } else {
      line = longer;
    }
  }
  lines << line;
  return lines.join('\n');
}

// Hovering an elided title shows it whole.
class TitleTip : public QObject {
 public:
  explicit TitleTip(QCustomPlot* chart) : QObject(chart), chart_(chart) {}

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (watched != chart_ || event->type() != QEvent::ToolTip) return false;
    const auto* help = static_cast<QHelpEvent*>(event);
    QCPTextElement* title = title_of(chart_);
    if (!title || !title->outerRect().contains(help->pos())) return false;
    const QString whole = title->property(kWholeTitle).toString();
    if (title->text() == whole) return false;
    QToolTip::showText(help->globalPos(), whole, chart_);
    return true;
  }

 private:
  QCustomPlot* chart_;
};

}  // namespace

QCustomPlot* make_chart(const QString& title, const QString& x_label, const QString& y_label) {
  auto* chart = new QCustomPlot;
  chart->plotLayout()->insertRow(0);
  chart->plotLayout()->addElement(0, 0,
                                  new QCPTextElement(chart, title, QFont("sans", 10, QFont::Bold)));
  set_chart_title(chart, title);
  chart->installEventFilter(new TitleTip(chart));
  chart->xAxis->setLabel(x_label);
  chart->yAxis->setLabel(y_label);
  // The legend lives in its own row under the axes, not inside them: it can never cover a point.
  // An empty legend takes no room (a hidden one with entries would still take its rows).
  chart->axisRect()->insetLayout()->take(chart->legend);
  put_legend_in_layout(chart);
  chart->plotLayout()->setRowSpacing(0);
  // A grid column is as narrow as the narrowest maximum in it, and an empty legend's maximum is
  // its margins: unbounded, the axes above keep the chart's width when there are no curves.
  chart->legend->setMaximumSize(kUnbounded, kUnbounded);
  chart->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
  chart->legend->setWrap(3);
  chart->legend->setVisible(false);  // shown once there are curves
  chart->legend->setFont(QFont("sans", 8));
  chart->legend->setBorderPen(Qt::NoPen);
  chart->legend->setMargins(QMargins(4, 0, 4, 2));
  // Refitted before every replot: new entries, and a resize (which replots), both change them.
  QObject::connect(chart, &QCustomPlot::beforeReplot, chart, [chart] {
    place_legend(chart);
    fit_legend(chart, chart->width());
    elide_title(chart);
  });
  if (x_label == "step") {
    QSharedPointer<QCPAxisTickerFixed> whole(new QCPAxisTickerFixed);
    whole->setTickStep(1.0);
    whole->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);  // 1, 2, 5, 10 … steps apart
    chart->xAxis->setTicker(whole);
  }
  chart->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  chart->setPlottingHints(QCP::phFastPolylines | QCP::phCacheLabels);
  // An explicit minimum stands in for QCustomPlot's own hint, which is as wide as the title and
  // the legend's widest row: titles are elided and legends rewrap instead, so a long run name
  // never widens the window.
  chart->setMinimumSize(160, 140);
  // Double-click resets the view to the data.
  QObject::connect(chart, &QCustomPlot::mouseDoubleClick, chart, [chart](QMouseEvent*) {
    chart->rescaleAxes();
    chart->replot();
  });
  return chart;
}

void set_chart_title(QCustomPlot* chart, const QString& title) {
  if (QCPTextElement* text = title_of(chart)) {
    text->setProperty(kWholeTitle, title);
    text->setText(title);
    if (chart->width() > 0) elide_title(chart);
  }
}

QString chart_title(QCustomPlot* chart) {
  const QCPTextElement* title = title_of(chart);
  return title ? title->property(kWholeTitle).toString() : QString();
}

QString shown_chart_title(QCustomPlot* chart) {
  const QCPTextElement* title = title_of(chart);
  return title ? title->text() : QString();
}

void use_shared_legend(QCustomPlot* chart) {
  chart->setProperty(kSharedLegend, true);
  chart->legend->setVisible(false);
  place_legend(chart);
}

bool legend_on_screen(QCustomPlot* chart) {
  return legend_in_layout(chart) && chart->legend->visible() && chart->legend->itemCount() > 0;
}

bool chart_has_data(QCustomPlot* chart) {
  for (int i = 0; i < chart->plottableCount(); ++i) {
    const QCPAbstractPlottable* plottable = chart->plottable(i);
    if (const auto* graph = qobject_cast<const QCPGraph*>(plottable)) {
      if (graph->dataCount() > 0) return true;
    } else if (const auto* bars = qobject_cast<const QCPBars*>(plottable)) {
      if (bars->dataCount() > 0) return true;
    }
  }
  return false;
}

void reset_empty_axes(QCustomPlot* chart) {
  if (chart_has_data(chart)) return;
  chart->xAxis->setRange(0.0, 1.0);
  chart->yAxis->setRange(0.0, 1.0);
  chart->legend->setVisible(false);
}

QStringList chart_files(const std::vector<NamedChart>& charts, const QString& directory,
                        const QString& name) {
  QStringList files;
  for (const NamedChart& named : charts) {
    if (!chart_has_data(named.chart)) continue;
    const QString base = QDir(directory).filePath(name + "-" + named.suffix);
    files << base + ".png" << base + ".pdf";
  }
  return files;
}

QStringList save_charts(const std::vector<NamedChart>& charts, const QString& directory,
                        const QString& name) {
  QStringList written;
  for (const NamedChart& named : charts) {
    QCustomPlot* chart = named.chart;
    if (!chart_has_data(chart)) continue;
    // Drawn at the export size with the legend under the plot and the whole title, then put
    // back as the screen had it.
    const bool was_in_layout = legend_in_layout(chart);
    const bool legend_was_visible = chart->legend->visible();
    QCPTextElement* title = title_of(chart);
    const QString shown = title ? title->text() : QString();
    if (!was_in_layout) put_legend_in_layout(chart);
    chart->legend->setVisible(chart->legend->itemCount() > 0);
    const int width = kExportPlotSize.width();
    int extra = 0;
    if (title) {
      title->setText(wrapped(chart_title(chart), title->font(), width - 16));
      extra += (static_cast<int>(title->text().count('\n'))) * QFontMetrics(title->font()).height();
    }
    fit_legend(chart, width);
    if (chart->legend->visible()) extra += chart->legend->minimumOuterSizeHint().height();
    const int height = kExportPlotSize.height() + extra;
    const QString base = QDir(directory).filePath(name + "-" + named.suffix);
    if (chart->savePng(base + ".png", width, height, 2.0)) written << base + ".png";
    if (chart->savePdf(base + ".pdf", width, height)) written << base + ".pdf";
    chart->legend->setVisible(legend_was_visible);
    if (!was_in_layout) take_legend_out(chart);
    if (title) title->setText(shown);
    chart->replot(QCustomPlot::rpQueuedReplot);  // refits the legend to the screen
  }
  return written;
}

}  // namespace rematlab::ui
