// SPDX-License-Identifier: Apache-2.0
// Control for the compile-fail tests: correct policies compile.
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/checkpoint/no_recompute.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

struct hooks {
  bool in_backward() const { return false; }
  bool queue_callback(void (*)(void*), void*) { return false; }
};

int main() {
  tequant::quantization_manager<tequant::delayed_scaling<>, tequant::engine_callback<hooks>> m;
  tequant::checkpoint_frame f;
  { auto g = m.checkpoint_forward(f); }
  tequant::quantization_manager<tequant::delayed_scaling<>, tequant::autocast_entry, tequant::no_recompute> n;
  { auto ac = n.autocast(); }
  return static_cast<int>(m.stats().outstanding_snapshots + n.stats().forward_updates) - 2;
}
