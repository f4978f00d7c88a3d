// error.hpp — ringtrain's exception types and the RT_CHECK macro that gives them context.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ringtrain {

// A failure inside ringtrain or a library it calls; the message already names what failed.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Bad input from the user (deck, CLI, data file): main exits with code 2, not 1.
class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(what) {}
};

// The process exit codes every rank uses.
enum ExitCode : int { kExitOk = 0, kExitFailure = 1, kExitBadInput = 2 };

namespace detail {
inline std::string concat() {
  return {};
}
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

// Builds a message from any streamable parts: str("layer ", name, " has ", n, " inputs").
template <typename... Parts>
std::string str(const Parts&... parts) {
  return detail::concat(parts...);
}

}  // namespace ringtrain

// Throws ringtrain::Error naming file:line when cond is false.
#define RT_CHECK(cond, ...)                                                                   \
  do {                                                                                        \
    if (!(cond))                                                                              \
      throw ::ringtrain::Error(::ringtrain::str(__FILE__, ":", __LINE__, ": ", __VA_ARGS__)); \
  } while (0)

// Throws ringtrain::InputError (exit code 2) when cond is false; the message is the user's.
#define RT_REQUIRE_INPUT(cond, ...)                                            \
  do {                                                                         \
    if (!(cond)) throw ::ringtrain::InputError(::ringtrain::str(__VA_ARGS__)); \
  } while (0)
