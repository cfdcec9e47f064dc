// The units the window draws and speaks in: memory in MiB (with one decimal as text), and in GiB
// where whole GPUs are concerned (the Scale tab).
#pragma once

#include <QString>
#include <cstdint>

namespace rematlab::ui {

inline constexpr double kMiB = 1048576.0;

inline constexpr double kGiB = 1024.0 * kMiB;

inline QString mib(int64_t bytes) {
  return QString::number(static_cast<double>(bytes) / kMiB, 'f', 1);
}

inline QString gib(int64_t bytes) {
  return QString::number(static_cast<double>(bytes) / kGiB, 'f', 1);
}

}  // namespace rematlab::ui
