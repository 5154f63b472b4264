// SPDX-License-Identifier: Apache-2.0
// The fields of each recipe's params that a state file records, in a fixed order.
#pragma once
#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>

#include "tequant/format/formats.hpp"
#include "tequant/policy.hpp"
#include "tequant/recipe/block.hpp"
#include "tequant/recipe/current.hpp"
#include "tequant/recipe/delayed.hpp"
#include "tequant/recipe/mxfp8.hpp"

namespace tequant::detail {

// A visitor sees (name, value) for each field; value is one of fp8_format, bool, std::uint32_t, int, float.
// The same function writes, reads and compares, so the three can never disagree on the order.
template <class P, class V>
void persist_fields(P& p, V&& v) {
  if constexpr (std::is_same_v<std::remove_const_t<P>, delayed_params>) {
    v("format", p.format);
    v("history_length", p.history_length);
    v("margin", p.margin);
    v("reduce_amax", p.reduce_amax);
  } else if constexpr (std::is_same_v<std::remove_const_t<P>, current_params> ||
                       std::is_same_v<std::remove_const_t<P>, block_params>) {
    v("format", p.format);
    v("power_2_scale", p.power_2_scale);
    v("amax_epsilon", p.amax_epsilon);
  } else if constexpr (std::is_same_v<std::remove_const_t<P>, mxfp8_params>) {
    v("format", p.format);
    v("weight_2d", p.weight_2d);
  } else {
    static_assert(dependent_false<P>,
                  "tequant: save_state/load_state do not know this recipe's params_type; add it to "
                  "tequant/persistence/params.hpp (persist_fields)");
  }
}

inline std::string param_to_string(fp8_format f) { return to_string(f); }
inline std::string param_to_string(bool b) { return b ? "true" : "false"; }
template <class T>
std::string param_to_string(T v) {
  std::ostringstream os;
  os.precision(9);  // enough digits to tell any two floats apart
  os << v;
  return os.str();
}

}  // namespace tequant::detail
