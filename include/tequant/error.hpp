// SPDX-License-Identifier: Apache-2.0
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tequant {

/// Every failure tequant reports: misuse, bad shapes, bad data, failed collectives or device calls.
/// The message always starts with "tequant: " and names what went wrong and where.
class error : public std::runtime_error {
 public:
  explicit error(const std::string& what) : std::runtime_error(with_prefix(what)) {}

 private:
  static std::string with_prefix(const std::string& what) {
    return what.rfind("tequant: ", 0) == 0 ? what : "tequant: " + what;
  }
};

namespace detail {

/// Builds the message from streamable parts only when we actually fail, so checks stay cheap.
template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  throw error(os.str());
}

template <class... Parts>
void require(bool condition, Parts&&... parts) {
  if (!condition) [[unlikely]] fail(std::forward<Parts>(parts)...);
}

}  // namespace detail
}  // namespace tequant
