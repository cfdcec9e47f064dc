#include "advice_words.h"

#include <QRegularExpression>

#include "field_errors.h"

namespace rematlab::ui {
namespace {

// Where the window does what a command does; a command it has no place for stays as written.
QString place_of(const QString& command) {
  static const QRegularExpression kSubcommand("^rematlab-cli\\s+(\\w[\\w-]*)");
  const auto match = kSubcommand.match(command);
  const QString subcommand = match.hasMatch() ? match.captured(1) : QString();
  if (subcommand == "plan" || subcommand == "estimate" || subcommand == "profile")
    return "the Plan tab";
  if (subcommand == "check" && !command.contains("--at-step")) return "Check gradients";
  if (subcommand == "max-batch") return "the form's Max batch under budget";
  if (subcommand == "diagnose") return "this advisor";
  return "the command line's `" + command + "`";
}

// "--precision" → "Precision"; empty for a flag the form has no field for.
QString form_label(const QString& flag) {
  const QString key = flag.mid(2).replace('-', '_');
  const QString label = field_label(flag);
  return label == key && key != "d_model" ? QString() : label;
}

QString flags_in_form_words(const QString& text) {
  static const QRegularExpression kFlag("--([a-z][a-z0-9-]*)(?: ([^\\s,;()]+))?");
  QString said;
  qsizetype from = 0;
  for (auto it = kFlag.globalMatch(text); it.hasNext();) {
    const auto match = it.next();
    const QString between = text.mid(from, match.capturedStart() - from);
    const QString label = form_label("--" + match.captured(1));
    const QString value = match.captured(2);
    const QString words = label.isEmpty()   ? "the command line's " + match.captured(0)
                          : value.isEmpty() ? label
                                            : label + " " + value;
    said += (from > 0 && between == " " ? QString(", ") : between) + words;
    from = match.capturedEnd();
  }
  return said + text.mid(from);
}

}  // namespace

QString in_form_words(const QString& command_line_text) {
  QString text = command_line_text;
  // Commands first (their flags are theirs), then what qualifies them.
  static const QRegularExpression kCommand("`(rematlab-cli[^`]*)`");
  QString placed;
  qsizetype from = 0;
  for (auto it = kCommand.globalMatch(text); it.hasNext();) {
    const auto match = it.next();
    placed += text.mid(from, match.capturedStart() - from) + place_of(match.captured(1));
    from = match.capturedEnd();
  }
  text = placed + text.mid(from);
  static const QRegularExpression kQualifier(
      " with the run's (settings|flags|--preset and --batch)");
  text.replace(kQualifier, " for the run's configuration");
  text.replace("the same flags", "the same settings");
  // "--flag value": the field's label and the value, several in a row joined by commas; not
  // inside a command left as the command line's (between backticks).
  QStringList parts = text.split('`');
  for (qsizetype part = 0; part < parts.size(); part += 2)
    parts[part] = flags_in_form_words(parts[part]);
  return parts.join('`');
}

}  // namespace rematlab::ui
