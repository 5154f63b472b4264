// SPDX-License-Identifier: Apache-2.0
// Must not compile: a stateful recipe of a user's that forgot update(); the error names that member.
#include <span>
#include <string_view>
#include <vector>

#include "tequant/backend/host.hpp"
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/concepts.hpp"

struct forgetful {
  using policy_kind = tequant::recipe_kind;
  struct params_type {};
  template <class Backend>
  using state_for = std::vector<float>;
  static constexpr std::string_view name = "forgetful";
  static void validate(const params_type&) {}
  template <class V>
  static void visit_params(params_type&, V&&) {}
  template <class Backend>
  static std::vector<float> make_state(const params_type&, const Backend&) { return {}; }
  static void add_slot(std::vector<float>& s) { s.push_back(0.0f); }
  static std::span<float> staging(std::vector<float>& s) { return s; }
  static bool reduces_amax(const params_type&) { return false; }
  static tequant::cast_plan plan(const params_type&, std::vector<float>& s, tequant::slot_id slot) {
    return {nullptr, s.data() + slot.index};
  }
  static void save_state(const std::vector<float>&, tequant::detail::byte_writer&) {}
  template <class Backend>
  static std::vector<float> load_state(tequant::detail::byte_reader&, const params_type&, const Backend&) { return {}; }
};
int main() { using manager = tequant::quantization_manager<forgetful, tequant::autocast_entry>;
  manager m;  // an object, not only the type: no second error from the constructor either
  (void)m;
  return 0; }
