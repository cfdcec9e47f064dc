// The docs' pictures, made by the program itself. The README's: a short sweep of the tiny model run
// through the real window, the live view captured mid-sweep and the comparison at the end, at
// 1600×1000 and again at 1280×720 (the "-1280x720" pair).
#pragma once

#include <QString>

namespace rematlab::ui {

// Returns the process exit code (0 when both PNGs were written).
int run_demo_and_take_screenshots(const QString& database, const QString& directory);

// The Plan tab's chart for the most recently profiled configuration in `database` (opened
// read-only), with its measured runs, saved as the PNG `file` (docs/benchmarks.md's frontier).
// Returns 0, or 2 with one line on stderr when there is no such database or profile.
int save_plan_chart(const QString& database, const QString& file);

}  // namespace rematlab::ui
