// The advisor's next steps in the window's words: core writes them for the command line
// ("--checkpoint every:1", "`rematlab-cli plan --budget 12MiB` with the run's settings"); the
// Advisor panel says them as the form and the tabs name them ("Policies every:1", "the Plan
// tab"). A flag the form has no field for stays a flag, said as the command line's.
#pragma once

#include <QString>

namespace rematlab::ui {

QString in_form_words(const QString& command_line_text);

}  // namespace rematlab::ui
