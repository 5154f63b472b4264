// SPDX-License-Identifier: Apache-2.0
// Must not compile: a communicator without all_reduce_max.
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/checkpoint/no_recompute.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

struct half_comm {
  using policy_kind = tequant::comm_kind;
  std::uint32_t rank() const { return 0; }
};
int main() {
  using manager = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::autocast_entry,
                                                               tequant::stacked_recompute, half_comm>;
  manager m;  // an object, not only the type: no second error from the constructor either
  (void)m;
  return 0;
}
