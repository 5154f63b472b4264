// SPDX-License-Identifier: Apache-2.0
// What a checkpoint policy is: whether activation recompute frames exist and what a replay sees.
#pragma once
#include <concepts>
#include <type_traits>

#include "tequant/policy.hpp"

namespace tequant {

/// Activation-recompute policy of the manager.
/// Semantic requirements:
///  1. `supports_recompute` false: the manager's checkpoint_forward/checkpoint_replay do not compile
///     (a `tequant:` static_assert), so a model that recomputes cannot silently get wrong scales.
///  2. `supports_recompute` true: frames follow ARCHITECTURE §4 (per-frame scale snapshots, stacked
///     nesting, LIFO restore on every exit, no snapshot without gradients).
///  3. The policy is an empty type (its data lives in the frames and the manager).
template <class C>
concept checkpoint_policy = std::derived_from<typename C::policy_kind, checkpoint_kind> && std::is_empty_v<C> &&
                            requires {
                              { C::supports_recompute } -> std::convertible_to<bool>;
                            };

}  // namespace tequant
