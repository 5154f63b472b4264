// SPDX-License-Identifier: Apache-2.0
// Must not compile: a comm policy in the backend slot.
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/checkpoint/no_recompute.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

int main() {
  using manager = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::autocast_entry,
                                                               tequant::stacked_recompute, tequant::single_process,
                                                               tequant::single_process>;
  manager m;  // an object, not only the type: no second error from the constructor either
  (void)m;
  return 0;
}
