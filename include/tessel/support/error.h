// Tessel's two error channels: UserError for bad models, files and flags; InternalError for broken invariants.
#pragma once

#include <stdexcept>
#include <string>

namespace tessel {

/// A problem with what the user gave us (model, IR file, flag, input tensor). The CLI prints the
/// message and exits with status 2. Messages name the node / file / key and what was expected.
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& message) : std::runtime_error(message) {}
};

/// A bug in Tessel itself (a violated invariant). The CLI exits with status 1.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

[[noreturn]] void throwInternalError(const char* file, int line, const char* cond, const std::string& message);

}  // namespace tessel

/// Checks a compiler invariant; on failure throws InternalError with the location and message.
#define TESSEL_ASSERT(cond, ...)                                                      \
  do {                                                                                \
    if (!(cond)) ::tessel::throwInternalError(__FILE__, __LINE__, #cond, std::string{__VA_ARGS__}); \
  } while (0)
