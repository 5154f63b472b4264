// SPDX-License-Identifier: Apache-2.0
// Must not compile: a boundary policy of a user's that opts in but never says what a request does.
#include "tequant/backend/host.hpp"
#include "tequant/boundary/concepts.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

struct silent_boundary {
  using policy_kind = tequant::boundary_kind;
  template <class Port>
  void on_top_level_entry(Port& port) {
    port.flush();
  }
};
int main() {
  using manager = tequant::quantization_manager<tequant::delayed_scaling<>, silent_boundary>;
  manager m;  // an object, not only the type: no second error from the constructor either
  (void)m;
  return 0;
}
