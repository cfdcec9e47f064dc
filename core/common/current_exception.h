// One line describing the exception being handled, for catch (...) blocks that must not let
// anything escape (a worker thread's slot, a callback): LibTorch errors without their C++
// backtrace, standard exceptions by what(), anything else as "unknown error".
#pragma once

#include <string>

namespace rematlab {

std::string describe_current_exception();

}  // namespace rematlab
