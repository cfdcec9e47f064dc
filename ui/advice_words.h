// What core tells the user about settings, in the window's words: core names settings and
// commands as parts of a Wording, which the command line says as flags ("--checkpoint every:1",
// "`rematlab-cli plan --budget 12MiB` with the run's settings") and the window as its form and
// tabs name them ("Policies every:1", "the Plan tab for the run's configuration"). A setting the
// form has no field for stays a flag, said as the command line's.
#pragma once

#include <QString>
#include <optional>

namespace rematlab {
class Wording;
}

namespace rematlab::ui {

QString in_form_words(const Wording& words);

// The form's label of a run setting ("d_model" → "d_model", "checkpoint" → "Policies");
// nothing for a setting the form has no field for.
std::optional<QString> form_label(const QString& key);

}  // namespace rematlab::ui
