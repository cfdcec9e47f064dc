// Asking before chart images are written over files already there: an export into a folder that
// holds an earlier one must not replace twenty files without a word.
#pragma once

#include <QStringList>

class QWidget;

namespace rematlab::ui {

// True when none of `files` exists, or when the user agreed to replace those that do (No is the
// default: Enter on a dialog that came unexpectedly keeps the files).
bool may_replace(QWidget* parent, const QStringList& files);

}  // namespace rematlab::ui
