// SPDX-License-Identifier: Apache-2.0
// What a checkpoint policy is: the part that owns a manager's activation-recompute frames.
#pragma once
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "tequant/cast_plan.hpp"
#include "tequant/checkpoint/frame.hpp"
#include "tequant/manager_types.hpp"
#include "tequant/policy.hpp"

namespace tequant {

namespace detail {
/// Stands for the callable that names a slot in a frame stack's error messages.
struct describe_slot_archetype {
  std::string operator()(slot_id) const { return {}; }
};
}  // namespace detail

/// Activation-recompute policy of the manager: an empty tag type naming the frame stack each manager
/// keeps, `template <class Backend> using stack_for = ...;`. The stack has
///   bool empty(), bool in_replay(), std::uint32_t depth(), std::size_t outstanding()
///   cast_plan plan_forward(slot, live_plan, backend, forward_slots, owner, describe)
///   void require_quiescent(where)
/// and, when it supports recompute, open_forward(frame, active, enabled, owner), open_replay(frame,
/// owner) -> bool (the recorded autocast state) and close(frame, unwinding) noexcept.
/// Semantic requirements: frames follow ARCHITECTURE §4 (per-frame snapshots of what a cast used,
/// stacked nesting, LIFO restore on every exit, no snapshot without gradients); a stack that does not
/// support recompute makes checkpoint_forward/checkpoint_replay fail to compile (a `tequant:` error),
/// so a model that recomputes cannot silently get wrong scales.
template <class C>
concept checkpoint_policy = std::derived_from<typename C::policy_kind, checkpoint_kind> && std::is_empty_v<C>;

/// The frame stack a checkpoint policy gives a manager with backend `B`.
template <class C, class B>
concept checkpoint_stack_for = checkpoint_policy<C> && requires { typename C::template stack_for<B>; } &&
    requires(typename C::template stack_for<B>& s, const typename C::template stack_for<B>& cs, slot_id slot,
             cast_plan plan, B& backend, std::size_t n, const std::string& where) {
      { cs.empty() } -> std::convertible_to<bool>;
      { cs.in_replay() } -> std::convertible_to<bool>;
      { cs.depth() } -> std::convertible_to<std::uint32_t>;
      { cs.outstanding() } -> std::convertible_to<std::size_t>;
      { s.plan_forward(slot, plan, backend, n, nullptr, detail::describe_slot_archetype{}) }
          -> std::same_as<cast_plan>;
      cs.require_quiescent(where);
    };

/// Whether the stack supports recompute (checkpoint_forward / checkpoint_replay compile).
template <class Stack>
concept recompute_stack = requires(Stack& s, checkpoint_frame& f) {
  s.open_forward(f, true, true, nullptr);
  { s.open_replay(f, nullptr) } -> std::convertible_to<bool>;
  s.close(f, false);
};

namespace detail {

/// One `tequant:` error naming the first requirement a checkpoint policy misses (style guide P5).
template <class C, class B>
constexpr bool check_checkpoint() {
  if constexpr (!opts_in_as<C, checkpoint_kind>) {
    static_assert(dependent_false<C>,
                  "tequant: Checkpoint (3rd argument of quantization_manager) must model tequant::checkpoint_policy "
                  "(stacked_recompute, no_recompute): it does not declare `using policy_kind = "
                  "tequant::checkpoint_kind;` - see checkpoint/concepts.hpp");
    return false;
  } else if constexpr (!std::is_empty_v<C>) {
    static_assert(dependent_false<C>,
                  "tequant: Checkpoint (3rd argument of quantization_manager) must model tequant::checkpoint_policy: "
                  "it must be an empty tag type (its frames live in stack_for<Backend>) - see checkpoint/concepts.hpp");
    return false;
  } else if constexpr (!requires { typename C::template stack_for<B>; }) {
    static_assert(dependent_false<C>,
                  "tequant: Checkpoint (3rd argument of quantization_manager) must model tequant::checkpoint_policy: "
                  "it is missing `template <class Backend> using stack_for = ...;` (the frame stack) - see "
                  "checkpoint/concepts.hpp");
    return false;
  } else if constexpr (!checkpoint_stack_for<C, B>) {
    static_assert(dependent_false<C>,
                  "tequant: Checkpoint (3rd argument of quantization_manager): its stack_for<Backend> lacks a member "
                  "of the frame-stack interface (empty, in_replay, depth, outstanding, plan_forward, "
                  "require_quiescent) - see checkpoint/concepts.hpp");
    return false;
  } else {
    return true;
  }
}

}  // namespace detail
}  // namespace tequant
