#include "field_errors.h"

#include "advice_words.h"
#include "common/errors.h"

namespace rematlab::ui {

FieldError explain(const InvalidInput& error) {
  FieldError explained;
  explained.key = QString::fromStdString(error.setting());
  // Settings the form edits in one field: the search's budget, the launcher's ranks.
  if (explained.key == "max_batch") explained.key = "budget";
  if (explained.key == "nproc" || explained.key == "world_size") explained.key = "ranks";
  if (!explained.key.isEmpty()) explained.label = form_label(explained.key).value_or(explained.key);
  explained.text = in_form_words(error.reason_words());
  return explained;
}

}  // namespace rematlab::ui
