// The readable breakdown `rematlab-cli estimate` prints without --json.
#pragma once

#include <string>

#include "estimate/estimate.h"

namespace rematlab::cli {

std::string estimate_to_text(const estimate::Estimate& estimate);

}  // namespace rematlab::cli
