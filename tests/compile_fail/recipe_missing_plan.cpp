// SPDX-License-Identifier: Apache-2.0
// Must not compile: a stateless recipe of a user's without plan(params, slot); the error names it.
#include <string_view>

#include "tequant/backend/host.hpp"
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/concepts.hpp"

struct planless {
  using policy_kind = tequant::recipe_kind;
  struct params_type {};
  static constexpr std::string_view name = "planless";
  static void validate(const params_type&) {}
  template <class V>
  static void visit_params(params_type&, V&&) {}
};
int main() { using manager = tequant::quantization_manager<planless, tequant::autocast_entry>;
  manager m;  // an object, not only the type: no second error from the constructor either
  (void)m;
  return 0; }
