// SPDX-License-Identifier: Apache-2.0
// Must not compile: hooks that cannot queue a callback.
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/checkpoint/no_recompute.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

struct hooks_without_queue {
  bool in_backward() const { return false; }
};
int main() { return static_cast<int>(sizeof(tequant::engine_callback<hooks_without_queue>)); }
