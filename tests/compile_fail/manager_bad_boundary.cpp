// SPDX-License-Identifier: Apache-2.0
// Must not compile: a boundary that does not opt in.
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/checkpoint/no_recompute.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

struct not_a_boundary {};
int main() {
  using manager = tequant::quantization_manager<tequant::delayed_scaling<>, not_a_boundary>;
  manager m;  // an object, not only the type: no second error from the constructor either
  (void)m;
  return 0;
}
