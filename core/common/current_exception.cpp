#include "common/current_exception.h"

#include <c10/util/Exception.h>

#include <exception>

namespace rematlab {

std::string describe_current_exception() {
  try {
    throw;
  } catch (const c10::Error& error) {
    return std::string("LibTorch: ") + error.what_without_backtrace();
  } catch (const std::exception& error) {
    return error.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace rematlab
