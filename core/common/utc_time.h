// The time records carry: UTC, to the second, as ISO 8601 ("2026-12-01T01:02:03Z").
#pragma once

#include <string>

namespace rematlab {

std::string utc_now();

}  // namespace rematlab
