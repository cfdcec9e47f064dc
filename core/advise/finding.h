// What the advisor says about a run: findings, each with the figures that show it and one
// concrete thing to try next. Plain values, no LibTorch: the CLI and the window show them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/wording.h"

namespace rematlab::advise {

enum class FindingKind {
  kDiverged,
  kMemoryNotReduced,
  kThroughputDropped,
  kMissingGradients,
  kDidNotFinish
};

// "diverged", "memory_not_reduced", "throughput_dropped", "missing_gradients", "did_not_finish".
std::string to_string(FindingKind kind);

// One figure of a finding, with its unit in the text ("512.0 MiB", "41.3 ms", "12 %").
struct Evidence {
  std::string label;
  std::string value;
};

struct Finding {
  FindingKind kind = FindingKind::kDiverged;
  std::string title;
  std::vector<Evidence> evidence;
  Wording next_step;  // a command or setting to try
};

// Everything the advisor found about one run, what it could not check (and why), and what it
// checked and found fine, so a silent report never stands for "checked and fine" unsaid.
struct Diagnosis {
  int64_t run_id = 0;
  std::string run_label;
  std::vector<Finding> findings;
  std::vector<Wording> notes;
  std::vector<Wording> checked;
};

nlohmann::json to_json(const Finding& finding);
nlohmann::json to_json(const Diagnosis& diagnosis);
// The human form: one block per finding, then the notes.
std::string format_diagnosis(const Diagnosis& diagnosis);

// "12.5 ms", "3.2 %": the units the findings quote.
std::string format_ms(double ms);
std::string format_percent(double fraction);

}  // namespace rematlab::advise
