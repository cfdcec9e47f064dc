#include "cli/cli_output.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "common/byte_size.h"
#include "common/json_numbers.h"

namespace rematlab::cli {

void print_json_line(const nlohmann::json& object) {
  std::cout << dump_json(object) << std::endl;  // a path that is not UTF-8 must not lose the result
}

void print_step_progress(const StepMetrics& step, const std::string& label) {
  // A mixture of experts' balance loss beside the loss (k when the experts share evenly),
  // its busiest expert's load (1 when every expert takes its share) and, under --ep, the
  // fullest rank's.
  char rank_load[32] = "";
  if (!std::isnan(step.expert_rank_load)) {
    std::snprintf(rank_load, sizeof rank_load, "  rank load %.2f", step.expert_rank_load);
  }
  char balance[96] = "";
  if (!std::isnan(step.balance_loss)) {
    std::snprintf(balance, sizeof balance, "  balance %.3f  load %.2f%s", step.balance_loss,
                  step.expert_load, rank_load);
  }
  char line[320];
  std::snprintf(line, sizeof line,
                "%sstep %lld/%lld  loss %.4f%s  %.0f tok/s  %.1f ms  peak %s  act %s%s",
                label.c_str(), static_cast<long long>(step.step + 1),
                static_cast<long long>(step.total_steps), step.loss, balance, step.tokens_per_s,
                step.step_ms, format_bytes(step.peak_bytes).c_str(),
                format_bytes(step.peak_activation_bytes).c_str(), step.warmup ? "  (warm-up)" : "");
  std::cerr << line << std::endl;
}

std::string format_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(header.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (std::size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  };
  widen(header);
  for (const auto& row : rows) widen(row);
  std::ostringstream out;
  auto emit = [&](const std::vector<std::string>& row) {
    for (std::size_t c = 0; c < row.size() && c < width.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      out << (c ? "  " : "") << (c ? pad + row[c] : row[c] + pad);
    }
    out << "\n";
  };
  emit(header);
  std::size_t total = 0;
  for (auto w : width) total += w + 2;
  out << std::string(total > 2 ? total - 2 : 0, '-') << "\n";
  for (const auto& row : rows) emit(row);
  return out.str();
}

std::string format_number(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string format_percent_change(double value, double baseline) {
  if (baseline == 0.0) return "n/a";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%+.1f%%", 100.0 * (value - baseline) / baseline);
  return buffer;
}

}  // namespace rematlab::cli
