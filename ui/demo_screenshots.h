// The README's pictures, made by the program itself: a short sweep of the tiny model run
// through the real window, the live view captured mid-sweep and the comparison at the end, at
// 1600×1000 and again at 1280×720 (the "-1280x720" pair).
#pragma once

#include <QString>

namespace rematlab::ui {

// Returns the process exit code (0 when both PNGs were written).
int run_demo_and_take_screenshots(const QString& database, const QString& directory);

}  // namespace rematlab::ui
