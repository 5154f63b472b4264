// SPDX-License-Identifier: Apache-2.0
// Must not compile: a recipe that does not opt in.
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/checkpoint/no_recompute.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

struct not_a_recipe {
  struct params_type {};
};
int main() { using manager = tequant::quantization_manager<not_a_recipe, tequant::autocast_entry>;
  manager m;  // an object, not only the type: no second error from the constructor either
  (void)m;
  return 0; }
