// Out-of-line helpers for Tessel's error channels.
#include "tessel/support/error.h"

#include <fmt/format.h>

namespace tessel {

void throwInternalError(const char* file, int line, const char* cond, const std::string& message) {
  throw InternalError(fmt::format("internal error at {}:{}: check '{}' failed{}{}", file, line, cond,
                                  message.empty() ? "" : ": ", message));
}

}  // namespace tessel
