// rematlab: the desktop workbench.
#include <QApplication>

#include "main_window.h"
#include "runtime/host_allocator.h"

int main(int argc, char** argv) {
  rematlab::configure_host_allocator_for_training();
  QApplication app(argc, argv);
  QApplication::setApplicationName("RematLab");
  rematlab::ui::MainWindow window;
  window.show();
  return QApplication::exec();
}
