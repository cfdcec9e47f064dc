// `rematlab-cli layout`'s answer as text: the fastest layouts that fit, the frontier, the
// nearest that do not fit and why, and the best one in other tools' terms.
#pragma once

#include <string>

#include "layout/layout_search.h"

namespace rematlab::cli {

std::string layout_to_text(const layout::LayoutRequest& request,
                           const layout::LayoutAnswer& answer);

}  // namespace rematlab::cli
