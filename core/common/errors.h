// Error types shared by every core module. InvalidInput is the user's mistake (CLI exit code 2);
// anything else that escapes is an internal failure (exit code 1).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "common/wording.h"

namespace rematlab {

// Bad input, attributed to the flag or field that carries it ("--heads", "spec: base.heads"),
// with the run setting it is about ("heads") so that a front end can name it its own way.
// Copies share what they hold: copying one, as throwing and catching do, cannot throw.
class InvalidInput : public std::runtime_error {
 public:
  InvalidInput(std::string field, Wording reason);
  // An error about `setting`, found in `field` (a sweep spec's point): the command line names
  // the setting's flag before the reason ("spec: base.heads: --heads 7 heads do not divide …").
  InvalidInput(std::string field, std::string setting, Wording reason);
  // Copied, never moved: a moved-from error would hold nothing to answer field() with.
  InvalidInput(const InvalidInput&) = default;
  InvalidInput& operator=(const InvalidInput&) = default;

  const std::string& field() const { return said_->field; }
  // The run setting at fault by its key ("d_model"), read from the field unless given; a field
  // that is neither a flag nor a spec key gives its own name ("sweep"), a spec's point none.
  const std::string& setting() const { return said_->setting; }
  // The reason as the command line says it, and in its parts (without the flag the second
  // constructor puts before it).
  const std::string& reason() const { return said_->reason_text; }
  const Wording& reason_words() const { return said_->reason; }
  // The whole of what() in parts: the field (as a setting where it is a flag), then the reason.
  Wording words() const;

 private:
  struct Said {
    std::string field;
    std::string setting;
    Wording reason;
    bool setting_said_first = false;  // the second constructor's: the flag before the reason
    std::string reason_text;
  };
  std::shared_ptr<const Said> said_;
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
