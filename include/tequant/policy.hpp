// SPDX-License-Identifier: Apache-2.0
// Opt-in tags: a policy declares `using policy_kind = tequant::<role>_kind;` so that no type models a
// policy concept by accident; the concepts next to each role then check the shape.
#pragma once
#include <concepts>

namespace tequant {

struct recipe_kind {};      ///< how a tensor is scaled (recipe/)
struct boundary_kind {};    ///< when the backward update is flushed (boundary/)
struct checkpoint_kind {};  ///< what activation recompute sees (checkpoint/)
struct comm_kind {};        ///< how amaxes are reduced across ranks (comm/)
struct backend_kind {};     ///< where quantization runs (backend/)

/// P declares `using policy_kind = Kind;` (or a type derived from it). A concept, so that a type
/// without policy_kind is simply "no" (the checks' first question, before any other member is named).
template <class P, class Kind>
concept opts_in_as = requires { typename P::policy_kind; } && std::derived_from<typename P::policy_kind, Kind>;

namespace detail {
/// For static_assert(false)-style messages that must only fire on instantiation.
template <class...>
inline constexpr bool dependent_false = false;
}  // namespace detail

}  // namespace tequant
