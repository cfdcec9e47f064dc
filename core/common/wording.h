// Words that name settings and commands as such, so that each front end says them its own way:
// the command line as flags and commands ("--checkpoint every:1", "`rematlab-cli plan`"), the
// window as its fields and tabs ("Policies every:1", "the Plan tab"). Core writes what it tells
// the user about settings (an error's reason, the advisor's next step) as a Wording, and nobody
// reads such text back to find the settings in it.
#pragma once

#include <string>
#include <vector>

namespace rematlab {

struct Phrase {
  enum class Kind {
    kText,         // words said as they are
    kSetting,      // a run setting, with a value or without ("--batch 8", "--checkpoint")
    kCommand,      // a rematlab-cli subcommand with its settings
    kRunSettings,  // "with the run's settings": the settings of the run being talked about
  };
  Kind kind = Kind::kText;
  std::string text;   // kText: the words; kSetting: the key ("d_model"); kCommand: "plan";
                      // kRunSettings: which of them the command line names ("settings", "flags")
  std::string value;  // kSetting: its value, empty when none is given
  std::vector<Phrase> arguments;  // kCommand: its settings and words, in order
};

class Wording {
 public:
  Wording() = default;
  Wording(std::string text);  // NOLINT(google-explicit-constructor): plain words convert
  Wording(const char* text);  // NOLINT(google-explicit-constructor)
  explicit Wording(Phrase phrase);

  const std::vector<Phrase>& phrases() const { return phrases_; }
  bool empty() const { return phrases_.empty(); }
  // How the command line says it: "--d-model 64", "`rematlab-cli plan --budget 12MiB`".
  std::string command_line() const;

  Wording& operator+=(const Wording& more);
  friend Wording operator+(Wording left, const Wording& right) { return left += right; }

 private:
  std::vector<Phrase> phrases_;
};

// A run setting by its key ("d_model", said "--d-model" on the command line), with its value.
Wording setting(std::string key, std::string value = {});
// A rematlab-cli subcommand and what follows it ("plan", setting("budget", "12MiB")).
Wording command(std::string subcommand, const Wording& arguments = {});
// "with the run's <which>": the settings of the run the words are about.
Wording runs_settings(std::string which = "settings");

// "d_model" → "--d-model".
std::string flag_of(const std::string& key);

}  // namespace rematlab
