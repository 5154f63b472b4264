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
  return static_cast<int>(sizeof(tequant::quantization_manager<tequant::delayed_scaling<>, not_a_boundary>));
}
