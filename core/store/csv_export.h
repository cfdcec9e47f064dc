// CSV reports of the runs database, RFC 4180: a header row, CRLF line ends, fields quoted when
// they hold a comma, a quote or a line break, quotes doubled. Every value is written in full
// (numbers in their shortest exact form) and every step is exported: nothing is sampled.
#pragma once

#include <string>
#include <vector>

#include "store/run_store.h"

namespace rematlab {

std::string csv_field(const std::string& text);

// One row per run: identity columns, then every config field, then every summary field.
std::string runs_csv(const std::vector<RunRecord>& runs);
// One row per step of each run, in run order.
std::string steps_csv(RunStore& store, const std::vector<RunRecord>& runs);

// Writes `text` to `path` through a temporary file in the same directory and a rename, so a
// failure never leaves a half-written file (nor the temporary). Throws InvalidInput("--csv", …).
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace rematlab
