// SPDX-License-Identifier: Apache-2.0
// How a recipe's params fields (what its visit_params shows) are written, read, compared and printed.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "tequant/format/bits.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/persistence/bytes.hpp"

namespace tequant::detail {

inline void write_field(byte_writer& w, fp8_format v) { w.u8(static_cast<std::uint8_t>(v)); }
inline void write_field(byte_writer& w, bool v) { w.u8(v ? 1 : 0); }
inline void write_field(byte_writer& w, std::uint32_t v) { w.u32(v); }
inline void write_field(byte_writer& w, int v) { w.i32(v); }
inline void write_field(byte_writer& w, float v) { w.f32(v); }
inline void write_field(byte_writer& w, std::uint64_t v) { w.u64(v); }

inline void read_field(byte_reader& r, const char* name, fp8_format& v) {
  const std::uint8_t b = r.u8();
  if (b > static_cast<std::uint8_t>(fp8_format::e5m2)) r.malformed("param ", name, " is ", unsigned{b});
  v = static_cast<fp8_format>(b);
}
inline void read_field(byte_reader& r, const char* name, bool& v) { v = r.boolean(name); }
inline void read_field(byte_reader& r, const char*, std::uint32_t& v) { v = r.u32(); }
inline void read_field(byte_reader& r, const char*, int& v) { v = r.i32(); }
inline void read_field(byte_reader& r, const char*, float& v) { v = r.f32(); }
inline void read_field(byte_reader& r, const char*, std::uint64_t& v) { v = r.u64(); }

/// Floats compare by bits (NaN and -0 included): a state file must round-trip exactly.
template <class T>
bool same_field(const T& a, const T& b) noexcept {
  if constexpr (std::is_same_v<T, float>) return float_bits(a) == float_bits(b);
  else return a == b;
}

inline std::string param_to_string(fp8_format f) { return to_string(f); }
inline std::string param_to_string(bool b) { return b ? "true" : "false"; }
template <class T>
std::string param_to_string(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    char buf[32];
    const int n = std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));  // tells any two floats apart
    return std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0u);
  } else {
    return std::to_string(v);
  }
}

/// "field is X in the file, Y in this manager" for the first field that differs, or "".
template <class Recipe, class Params>
std::string first_param_difference(Params file, Params live) {
  struct value {
    std::string name, text;
    std::uint64_t bits;
  };
  const auto collect = [](Params& p) {
    std::vector<value> out;
    Recipe::visit_params(p, [&](const char* name, auto& v) {
      std::uint64_t bits = 0;
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, float>) bits = float_bits(v);
      else bits = static_cast<std::uint64_t>(v);
      out.push_back({name, param_to_string(v), bits});
    });
    return out;
  };
  const std::vector<value> a = collect(file), b = collect(live);
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (a[i].bits != b[i].bits) return a[i].name + " is " + a[i].text + " in the file, " + b[i].text + " in this manager";
  return {};
}

}  // namespace tequant::detail
