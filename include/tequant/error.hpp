// SPDX-License-Identifier: Apache-2.0
#pragma once
#include <cstdio>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

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

/// One piece of an error message: text or a number, held by view (the message is built only when a
/// check fails, from parts that live until then).
class message_part {
 public:
  message_part(std::string_view text) noexcept : kind_(kind::text), text_(text) {}
  message_part(const char* text) noexcept : kind_(kind::text), text_(text) {}
  message_part(const std::string& text) noexcept : kind_(kind::text), text_(text) {}
  message_part(char c) noexcept : kind_(kind::character), u_(static_cast<unsigned char>(c)) {}
  message_part(bool b) noexcept : kind_(kind::unsigned_integer), u_(b ? 1u : 0u) {}
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, char>)
  message_part(T v) noexcept {
    if constexpr (std::is_signed_v<T>) {
      kind_ = kind::signed_integer;
      s_ = v;
    } else {
      kind_ = kind::unsigned_integer;
      u_ = v;
    }
  }
  template <class T>
    requires std::is_floating_point_v<T>
  message_part(T v) noexcept : kind_(kind::real), d_(static_cast<double>(v)) {}
  template <class T>
    requires std::is_enum_v<T>
  message_part(T v) noexcept : message_part(static_cast<std::underlying_type_t<T>>(v)) {}

  void append_to(std::string& out) const {
    char buf[32];
    switch (kind_) {
      case kind::text: out.append(text_); return;
      case kind::character: out.push_back(static_cast<char>(u_)); return;
      // snprintf, not <charconv>: that header costs every includer 5k preprocessed lines
      case kind::signed_integer: return append_printed(out, std::snprintf(buf, sizeof buf, "%lld", s_), buf);
      case kind::unsigned_integer: return append_printed(out, std::snprintf(buf, sizeof buf, "%llu", u_), buf);
      case kind::real: return append_printed(out, std::snprintf(buf, sizeof buf, "%g", d_), buf);  // an ostream's default
    }
  }

 private:
  static void append_printed(std::string& out, int n, const char* buf) {
    out.append(buf, n > 0 ? static_cast<std::size_t>(n) : 0u);
  }
  enum class kind : unsigned char { text, character, signed_integer, unsigned_integer, real };
  kind kind_ = kind::text;
  std::string_view text_;
  long long s_ = 0;
  unsigned long long u_ = 0;
  double d_ = 0.0;
};

/// The one place a message is assembled (not a template: each check site only packs its parts).
[[noreturn]] inline void fail_with(std::initializer_list<message_part> parts) {
  std::string message;
  for (const message_part& p : parts) p.append_to(message);
  throw error(message);
}

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  fail_with({message_part(parts)...});
}

template <class... Parts>
void require(bool condition, const Parts&... parts) {
  if (!condition) [[unlikely]] fail_with({message_part(parts)...});
}

}  // namespace detail
}  // namespace tequant
