// rematlab: the desktop workbench.
#include <QApplication>

#include "main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("RematLab");
  rematlab::ui::MainWindow window;
  window.show();
  return QApplication::exec();
}
