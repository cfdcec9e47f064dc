// rematlab: the desktop workbench.
//   rematlab [--db FILE]                 open the window on a runs database
//   rematlab --demo-screenshots DIR      run a short two-run sweep of the tiny model, save the
//                                        live view (mid-sweep) and the comparison as PNGs, quit
//   rematlab --db FILE --plan-chart PNG  save the Plan tab's chart of FILE's latest profile, quit
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QIcon>
#include <QTemporaryDir>
#include <clocale>
#include <iostream>

#include "demo_screenshots.h"
#include "main_window.h"
#include "runtime/host_allocator.h"

int main(int argc, char** argv) {
  rematlab::configure_host_allocator_for_training();
  QApplication app(argc, argv);
  // Qt adopts the user's locale for C as well; sizes like "1.5GiB" are read with the C library,
  // which must then take '.' as the decimal point whatever the language (not "1,5").
  std::setlocale(LC_NUMERIC, "C");
  QApplication::setApplicationName("RematLab");
  QApplication::setApplicationVersion(REMATLAB_VERSION);  // --version and Help → About
  QApplication::setOrganizationName("RematLab");
  // The installed menu entry (org.rematlab.rematlab.desktop) and its icon: desktops match the
  // window to the entry by this name, and the icon theme finds the icon the package installs.
  QApplication::setDesktopFileName("org.rematlab.rematlab");
  QApplication::setWindowIcon(QIcon::fromTheme("rematlab"));

  QCommandLineParser options;
  options.setApplicationDescription("RematLab: activation checkpointing, measured.");
  options.addHelpOption();
  options.addVersionOption();
  const QCommandLineOption database("db", "Open this runs database.", "FILE");
  const QCommandLineOption screenshots(
      "demo-screenshots", "Run a short demo sweep, save screenshots to DIR, quit.", "DIR");
  const QCommandLineOption plan_chart(
      "plan-chart", "Save the Plan tab's chart of the database's latest profile as PNG, quit.",
      "PNG");
  options.addOption(database);
  options.addOption(screenshots);
  options.addOption(plan_chart);
  options.process(app);

  if (options.isSet(plan_chart)) {
    if (!options.isSet(database)) {
      std::cerr << "rematlab: error: --plan-chart needs --db FILE, the database to draw from\n";
      return 2;
    }
    return rematlab::ui::save_plan_chart(options.value(database), options.value(plan_chart));
  }

  if (options.isSet(screenshots)) {
    QApplication::setOrganizationName("RematLab-demo");  // leave the user's settings alone
    const QString directory = options.value(screenshots);
    QDir().mkpath(directory);
    const QTemporaryDir scratch;  // the demo's runs go away with it unless --db is given
    const QString db =
        options.isSet(database) ? options.value(database) : scratch.filePath("demo.sqlite");
    return rematlab::ui::run_demo_and_take_screenshots(db, directory);
  }
  rematlab::ui::MainWindow window(options.value(database));
  window.show();
  return QApplication::exec();
}
