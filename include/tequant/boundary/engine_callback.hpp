// SPDX-License-Identifier: Apache-2.0
// Flush once at the end of the outermost backward task, through the engine's final callbacks.
#pragma once
#include <type_traits>
#include <utility>

#include "tequant/boundary/concepts.hpp"
#include "tequant/config.hpp"
#include "tequant/policy.hpp"

namespace tequant {

/// One callback queued on the outermost backward task flushes the update (TE #3456). Where the hooks
/// cannot queue (no task, or an engine without callbacks) the update waits for the next top-level
/// autocast entry, like autocast_entry.
template <class Hooks>
struct engine_callback {
  static_assert(graph_hooks<Hooks>,
                "tequant: Hooks (argument of engine_callback) must model tequant::graph_hooks: "
                "bool in_backward() and bool queue_callback(void (*)(void*), void*) - see docs/graph_hooks.md");
  static_assert(std::is_nothrow_move_constructible_v<Hooks>,
                "tequant: Hooks (argument of engine_callback) must be nothrow move constructible");

  using policy_kind = boundary_kind;
  using hooks_type = Hooks;
  static constexpr bool flushes_at_autocast_entry = true;  // the fallback
  static constexpr bool requests_need_scope = false;
  static constexpr bool first_module_owns = false;
  static constexpr bool uses_graph_hooks = true;

  TEQUANT_NO_UNIQUE_ADDRESS Hooks hook_object{};

  constexpr engine_callback() = default;
  constexpr explicit engine_callback(Hooks h) noexcept : hook_object(std::move(h)) {}

  Hooks& hooks() noexcept { return hook_object; }
  const Hooks& hooks() const noexcept { return hook_object; }
};

}  // namespace tequant
