// SPDX-License-Identifier: Apache-2.0
// quantization_manager::plan_cast(slot_id): the cast path without a handle. Every cast checks its slot
// and asks the recipe; a forward plan is then shaped by the autocast state and the checkpoint frames.
// Always inlined into the manager's plan_cast, which hands it its parts.
#pragma once
#include "tequant/cast_plan.hpp"
#include "tequant/config.hpp"
#include "tequant/manager_types.hpp"

namespace tequant::detail {

/// `table` checks the slot, `recipe` plans it. A forward plan is disabled outside an enabled region
/// (`enabled`: high precision, no amax), else handed to `in_frames` where a frame is open
/// (`frames_open()`, asked only then).
template <class Table, class Recipe, class FramesOpen, class InFrames>
TEQUANT_ALWAYS_INLINE cast_plan plan_by_slot(slot_id slot, const Table& table, Recipe& recipe, bool enabled,
                                             FramesOpen&& frames_open, InFrames&& in_frames) {
  // One branch on the direction first: below it the direction is a constant, so the slot check and
  // the recipe's plan (its dtype) fold to the one direction.
  if (slot.dir == direction::forward) {
    table.template check_in<direction::forward>(slot, "plan_cast");
    const slot_id s{direction::forward, slot.bucket, slot.index};
    cast_plan plan = recipe.plan(s);
    if (!enabled) [[unlikely]] {
      plan.enabled = false;
      plan.amax = nullptr;
      return plan;
    }
    if (!frames_open()) return plan;
    return in_frames(s, plan);  // as it comes (no copy of the 64-byte plan through a local)
  }
  table.template check_in<direction::backward>(slot, "plan_cast");  // also refuses a direction that does not exist
  return recipe.plan(slot_id{direction::backward, slot.bucket, slot.index});
}

}  // namespace tequant::detail
