#include "chart_export.h"

#include <QAbstractButton>
#include <QDir>
#include <QFileInfo>
#include <QMessageBox>

namespace rematlab::ui {

bool may_replace(QWidget* parent, const QStringList& files) {
  QStringList there;
  for (const QString& file : files) {
    if (QFileInfo::exists(file)) there << QFileInfo(file).fileName();
  }
  if (there.isEmpty()) return true;
  const QString folder = QDir::toNativeSeparators(QFileInfo(files.front()).absolutePath());
  QMessageBox box(QMessageBox::Question, "Replace chart images",
                  there.size() == 1
                      ? QString("%1 is already in %2. Replace it?").arg(there.front(), folder)
                      : QString("%1 of the files to write are already in %2. Replace them?")
                            .arg(there.size())
                            .arg(folder),
                  QMessageBox::Yes | QMessageBox::No, parent);
  box.setDefaultButton(QMessageBox::No);
  box.setDetailedText(there.join("\n"));
  box.button(QMessageBox::Yes)->setText("Replace");
  box.button(QMessageBox::No)->setText("Keep them");
  return box.exec() == QMessageBox::Yes;
}

}  // namespace rematlab::ui
