#include "advise/finding.h"

#include <cstdio>
#include <sstream>

namespace rematlab::advise {

std::string to_string(FindingKind kind) {
  switch (kind) {
    case FindingKind::kDiverged:
      return "diverged";
    case FindingKind::kMemoryNotReduced:
      return "memory_not_reduced";
    case FindingKind::kThroughputDropped:
      return "throughput_dropped";
    case FindingKind::kMissingGradients:
      return "missing_gradients";
    case FindingKind::kDidNotFinish:
      return "did_not_finish";
  }
  return "unknown";
}

std::string format_ms(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f ms", ms);
  return text;
}

std::string format_percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %%", fraction * 100.0);
  return text;
}

namespace {

std::vector<std::string> command_lines(const std::vector<Wording>& lines) {
  std::vector<std::string> said;
  for (const Wording& line : lines) said.push_back(line.command_line());
  return said;
}

}  // namespace

nlohmann::json to_json(const Finding& finding) {
  nlohmann::json evidence = nlohmann::json::array();
  for (const Evidence& item : finding.evidence) {
    evidence.push_back({{"label", item.label}, {"value", item.value}});
  }
  return {{"kind", to_string(finding.kind)},
          {"title", finding.title},
          {"evidence", evidence},
          {"next_step", finding.next_step.command_line()}};
}

nlohmann::json to_json(const Diagnosis& diagnosis) {
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& finding : diagnosis.findings) findings.push_back(to_json(finding));
  return {{"run_id", diagnosis.run_id},
          {"run", diagnosis.run_label},
          {"findings", findings},
          {"notes", command_lines(diagnosis.notes)},
          {"checked", command_lines(diagnosis.checked)}};
}

std::string format_diagnosis(const Diagnosis& diagnosis) {
  std::ostringstream out;
  out << "Run " << diagnosis.run_label << ": ";
  if (diagnosis.findings.empty()) {
    out << "no findings\n";
  } else {
    out << diagnosis.findings.size() << (diagnosis.findings.size() == 1 ? " finding" : " findings")
        << "\n";
  }
  for (const Finding& finding : diagnosis.findings) {
    out << "\n[" << to_string(finding.kind) << "] " << finding.title << "\n";
    std::size_t width = 0;
    for (const Evidence& item : finding.evidence) width = std::max(width, item.label.size());
    for (const Evidence& item : finding.evidence) {
      out << "  " << item.label << std::string(width - item.label.size() + 2, ' ') << item.value
          << "\n";
    }
    out << "  next: " << finding.next_step.command_line() << "\n";
  }
  if (!diagnosis.notes.empty()) {
    out << "\nNot checked or approximate:\n";
    for (const Wording& note : diagnosis.notes) out << "  - " << note.command_line() << "\n";
  }
  if (!diagnosis.checked.empty()) {
    out << "\nChecked and fine:\n";
    for (const Wording& line : diagnosis.checked) out << "  - " << line.command_line() << "\n";
  }
  return out.str();
}

}  // namespace rematlab::advise
