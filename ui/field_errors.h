// A sweep spec's validation error, said in the form's words: core names the spec key and the
// command-line flag ("spec: base.heads: --heads 7 heads do not divide --d-model 64"); the window
// names the field as its label reads ("Heads: 7 heads do not divide d_model 64").
#pragma once

#include <QString>

namespace rematlab {
class InvalidInput;
}

namespace rematlab::ui {

struct FieldError {
  QString key;    // the form field's spec key ("heads", "checkpoint", …); empty when unknown
  QString label;  // the field's label in the form ("Heads", "Policies", …)
  QString text;   // the reason, with every flag replaced by its field's label
  QString message() const { return label.isEmpty() ? text : label + ": " + text; }
};

FieldError explain(const InvalidInput& error);

// The form label of a spec key or command-line flag ("d_model", "--d-model" → "d_model").
QString field_label(const QString& key_or_flag);

}  // namespace rematlab::ui
