// Error kinds shared by every module.
// UserError = bad input (a file, flag or tensor the user gave us is wrong): the CLI prints its
// one-line message and exits with code 2. Anything else escaping main is a bug: exit code 1.
#pragma once
#include <stdexcept>
#include <string>
#include <fmt/format.h>

namespace qt {

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// user_error("{}: tensor {} has {} bytes, expected {}", path, name, a, b)
template <typename... Args>
[[noreturn]] inline void user_error(fmt::format_string<Args...> f, Args&&... args) {
  throw UserError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace qt
