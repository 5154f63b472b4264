// SPDX-License-Identifier: Apache-2.0
// What a scaling recipe is: an empty policy type with a runtime params aggregate.
#pragma once
#include <concepts>
#include <string_view>
#include <type_traits>

#include "tequant/policy.hpp"

namespace tequant {

/// A scaling recipe: how a tensor is scaled before the FP8 cast.
/// Semantic requirements:
///  1. `R` is empty; every knob lives in `R::params_type`, an aggregate the manager stores.
///  2. `R::validate(params)` throws `tequant::error` for unusable params and does nothing otherwise.
///  3. `R::is_stateful` is true only when scales depend on earlier steps (delayed scaling); a stateless
///     recipe's `state_for<Backend>` is an empty type so it costs nothing in the manager.
template <class R>
concept scaling_recipe =
    std::derived_from<typename R::policy_kind, recipe_kind> && std::is_empty_v<R> &&
    requires(const typename R::params_type& p) {
      { R::name } -> std::convertible_to<std::string_view>;
      { R::is_stateful } -> std::convertible_to<bool>;
      R::validate(p);
    };

/// A recipe whose scales come from per-slot state that moves at update boundaries (delayed scaling).
/// Semantic requirements, beyond scaling_recipe:
///  1. `R::algo_type` is an empty functor `float(float current, float window_max)` choosing the amax.
///  2. `R::update_args(params, direction)` yields the per-bucket arguments of the fused update.
///  3. `R::state_for<Backend>` owns the per-bucket state (delayed_bucket<Backend>).
template <class R>
concept stateful_recipe = scaling_recipe<R> && R::is_stateful && requires { typename R::algo_type; };

}  // namespace tequant
