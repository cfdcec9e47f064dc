// A validation error, said in the form's words: core names the field at fault and the setting it
// is about ("spec: base.heads", setting "heads"), and the settings its reason mentions as parts;
// the window names them as its labels read ("Heads: 7 heads do not divide d_model 64").
#pragma once

#include <QString>

namespace rematlab {
class InvalidInput;
}

namespace rematlab::ui {

struct FieldError {
  QString key;    // the form field's spec key ("heads", "checkpoint", …); empty when unknown
  QString label;  // the field's label in the form ("Heads", "Policies", …)
  QString text;   // the reason, every setting it mentions said by its field's label
  QString message() const { return label.isEmpty() ? text : label + ": " + text; }
};

FieldError explain(const InvalidInput& error);

}  // namespace rematlab::ui
