#include "common/wording.h"

#include <algorithm>
#include <utility>

namespace rematlab {
namespace {

std::string said_on_the_command_line(const std::vector<Phrase>& phrases) {
  std::string said;
  for (const Phrase& phrase : phrases) {
    switch (phrase.kind) {
      case Phrase::Kind::kText:
        said += phrase.text;
        break;
      case Phrase::Kind::kSetting:
        said += flag_of(phrase.text) + (phrase.value.empty() ? "" : " " + phrase.value);
        break;
      case Phrase::Kind::kCommand: {
        const std::string arguments = said_on_the_command_line(phrase.arguments);
        said += "`rematlab-cli " + phrase.text + (arguments.empty() ? "" : " " + arguments) + "`";
        break;
      }
      case Phrase::Kind::kRunSettings:
        said += "with the run's " + phrase.text;
        break;
    }
  }
  return said;
}

}  // namespace

Wording::Wording(std::string text) {
  if (!text.empty()) phrases_.push_back({Phrase::Kind::kText, std::move(text), {}, {}});
}

Wording::Wording(const char* text) : Wording(std::string(text)) {}

Wording::Wording(Phrase phrase) { phrases_.push_back(std::move(phrase)); }

std::string Wording::command_line() const { return said_on_the_command_line(phrases_); }

Wording& Wording::operator+=(const Wording& more) {
  for (const Phrase& phrase : more.phrases_) {
    // Plain words next to plain words are one phrase: a reader walks settings, not fragments.
    if (phrase.kind == Phrase::Kind::kText && !phrases_.empty() &&
        phrases_.back().kind == Phrase::Kind::kText) {
      phrases_.back().text += phrase.text;
    } else {
      phrases_.push_back(phrase);
    }
  }
  return *this;
}

Wording setting(std::string key, std::string value) {
  return Wording(Phrase{Phrase::Kind::kSetting, std::move(key), std::move(value), {}});
}

Wording command(std::string subcommand, const Wording& arguments) {
  return Wording(Phrase{Phrase::Kind::kCommand, std::move(subcommand), {}, arguments.phrases()});
}

Wording runs_settings(std::string which) {
  return Wording(Phrase{Phrase::Kind::kRunSettings, std::move(which), {}, {}});
}

std::string flag_of(const std::string& key) {
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

}  // namespace rematlab
