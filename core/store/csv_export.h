// CSV reports of the runs database, RFC 4180: a header row, CRLF line ends, fields quoted when
// they hold a comma, a quote or a line break, quotes doubled. Every value is written in full
// (numbers in their shortest exact form, non-finite ones as nan, inf, -inf) and every step is
// exported: nothing is sampled. What was not measured is left blank, never written as 0.
#pragma once

#include <string>
#include <vector>

#include "store/run_store.h"

namespace rematlab {

std::string csv_field(const std::string& text);

// One row per run: identity columns, every config field (what the run trained with), then
// unread_config_fields (the recorded settings this build could not read, separated by ';', whose
// config columns hold defaults), what was asked (request_*), then every result field. No two
// columns share a name.
std::string runs_csv(const std::vector<RunRecord>& runs);
std::vector<std::string> runs_csv_header();
// One row per step of each run, in run order.
std::string steps_csv(RunStore& store, const std::vector<RunRecord>& runs);

// Writes `text` to `path` durably and atomically (files::write_file_durably): a failure never
// leaves a half-written file, nor the temporary. Throws InvalidInput("--csv", …).
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace rematlab
