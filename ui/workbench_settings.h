// Everything the window remembers between sessions, through one typed place.
#pragma once

#include <QByteArray>
#include <QSettings>
#include <QString>

namespace rematlab::ui {

class WorkbenchSettings {
 public:
  QByteArray geometry() const { return settings_.value("window/geometry").toByteArray(); }
  void set_geometry(const QByteArray& value) { settings_.setValue("window/geometry", value); }
  QString last_database() const { return settings_.value("runs/database").toString(); }
  void set_last_database(const QString& value) { settings_.setValue("runs/database", value); }
  qint64 last_experiment() const { return settings_.value("runs/experiment", 0).toLongLong(); }
  void set_last_experiment(qint64 value) { settings_.setValue("runs/experiment", value); }
  QString experiment_name() const {
    return settings_.value("sweep/experiment_name", "workbench").toString();
  }
  void set_experiment_name(const QString& value) {
    settings_.setValue("sweep/experiment_name", value);
  }
  // The form's values as a sweep spec (JSON), restored at the next start.
  QByteArray form() const { return settings_.value("sweep/form").toByteArray(); }
  void set_form(const QByteArray& spec_json) { settings_.setValue("sweep/form", spec_json); }

 private:
  QSettings settings_;
};

}  // namespace rematlab::ui
