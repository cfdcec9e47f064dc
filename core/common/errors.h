// Error types shared by every core module. InvalidInput is the user's mistake (CLI exit code 2);
// anything else that escapes is an internal failure (exit code 1).
#pragma once

#include <stdexcept>
#include <string>

namespace rematlab {

// Bad input, attributed to the flag or field that carries it (e.g. "--heads").
class InvalidInput : public std::runtime_error {
 public:
  InvalidInput(std::string field, const std::string& reason)
      : std::runtime_error(field + ": " + reason), field_(std::move(field)), reason_(reason) {}
  const std::string& field() const { return field_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string field_;
  std::string reason_;
};

// Stopped by the user (a signal, Stop in the window) before there was a result to record: a
// profile, a check, a rank still waiting for the others. The CLI exits 130 with the message.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace rematlab
