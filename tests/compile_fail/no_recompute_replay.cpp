// SPDX-License-Identifier: Apache-2.0
// Must not compile: a replay under no_recompute.
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/checkpoint/no_recompute.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

int main() {
  tequant::quantization_manager<tequant::delayed_scaling<>, tequant::autocast_entry, tequant::no_recompute> m;
  tequant::checkpoint_frame f;
  auto g = m.checkpoint_replay(f);
  return 0;
}
