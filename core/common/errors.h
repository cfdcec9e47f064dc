// Error types shared by every core module. InvalidInput is the user's mistake (CLI exit code 2);
// anything else that escapes is an internal failure (exit code 1).
#pragma once

#include <stdexcept>
#include <string>

#include "common/wording.h"

namespace rematlab {

// Bad input, attributed to the flag or field that carries it ("--heads", "spec: base.heads"),
// with the run setting it is about ("heads") so that a front end can name it its own way.
class InvalidInput : public std::runtime_error {
 public:
  InvalidInput(std::string field, Wording reason);
  // An error about `setting`, found in `field` (a sweep spec's point): the command line names
  // the setting's flag before the reason ("spec: base.heads: --heads 7 heads do not divide …").
  InvalidInput(std::string field, std::string setting, Wording reason);

  const std::string& field() const { return field_; }
  // The run setting at fault by its key ("d_model"); empty when the field names none.
  const std::string& setting() const { return setting_; }
  // The reason as the command line says it, and in its parts.
  const std::string& reason() const { return reason_text_; }
  const Wording& reason_words() const { return reason_; }
  // The whole of what() in parts: the field (as a setting where it is one), then the reason.
  Wording words() const;

 private:
  std::string field_;
  std::string setting_;
  Wording reason_;
  bool setting_said_first_ = false;  // the second constructor's: the flag before the reason
  std::string reason_text_;
};

// The setting a field names: "--d-model" → "d_model", "spec: axes.batch[1]" → "batch", "spec:
// axes (every:1 b8)" → "" (a point, not a setting), "sweep" → "sweep".
std::string setting_named_by(const std::string& field);

// Stopped by the user (a signal, Stop in the window) before there was a result to record: a
// profile, a check, a rank still waiting for the others. The CLI exits 130 with the message.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace rematlab
